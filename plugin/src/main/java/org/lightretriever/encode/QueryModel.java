package org.lightretriever.encode;

import java.util.Map;

/** A bundle's query side (tokenizer, table, sparse weights) loaded from its plugin parts. */
public final class QueryModel {
    private QueryModel() {
    }

    /** Parse and check the parts written by {@code lr_opensearch.plugin.artifact.plugin_parts}. */
    public static QueryModel load(Map<String, byte[]> parts) {
        throw new ModelFormatException("not implemented yet");
    }

    /** Encode one query text (thread-safe). */
    public EncodedQuery encode(String text) {
        throw new QueryTextException("not implemented yet");
    }

    public String bundleId() {
        return "";
    }

    public int dim() {
        return 0;
    }

    public long memoryBytes() {
        return 0;
    }

    public int maxTokens() {
        return 0;
    }
}
