package org.lightretriever.encode;

import java.util.LinkedHashMap;
import java.util.Map;

/**
 * A bundle's query side (tokenizer, table, sparse weights), loaded from the parts that
 * {@code lr_opensearch.plugin.artifact.plugin_parts} writes, encoding a query text exactly
 * as {@code lr_opensearch.query.encoder.QueryEncoder.encode} does:
 *
 * <ul>
 *   <li>the text is cut to {@code max_tokens x chars_per_token_cap} code points, tokenized
 *       ({@link BertWordPiece}), special tokens dropped, the first {@code max_tokens} kept;
 *   <li>dense = float32 sum of the table rows in position order, divided by float32(count);
 *   <li>sparse = lrk1 key -> IDF weight (or count) of each distinct token the sparse mask
 *       keeps, in order of first occurrence.
 * </ul>
 *
 * <p>Immutable after {@link #load}; {@link #encode} is thread-safe.
 */
public final class QueryModel {
    private final String bundleId;
    private final int dim;
    private final int maxTokens;
    private final int maxChars;
    private final BertWordPiece tokenizer;
    private final boolean[] special;
    private final float[] table;
    private final double[] idf;
    private final boolean[] sparseKeep;
    private final String[] keys;
    private final long memoryBytes;

    private QueryModel(ModelParts p) {
        this.bundleId = p.bundleId;
        this.dim = p.dim;
        this.maxTokens = p.maxTokens;
        this.maxChars = p.maxChars;
        this.tokenizer = p.tokenizer;
        this.special = p.special;
        this.table = p.table;
        this.idf = p.idf;
        this.sparseKeep = p.sparseKeep;
        this.keys = p.keys;
        this.memoryBytes = p.memoryBytes;
    }

    /**
     * Parse and check the parts (part name -> bytes).
     *
     * @throws ModelFormatException a part is missing, damaged (size, checksum) or of another
     *     format version; the message names the part.
     */
    public static QueryModel load(Map<String, byte[]> parts) {
        return new QueryModel(ModelParts.read(parts));
    }

    /**
     * Encode one query text.
     *
     * @throws QueryTextException the text is empty, has no tokens, or holds a lone surrogate.
     */
    public EncodedQuery encode(String text) {
        if (text == null) {
            throw new QueryTextException("the query text is missing (null); send a non-empty string");
        }
        String cut = cut(text);
        checkSurrogates(cut);
        BertWordPiece.Ids raw = new BertWordPiece.Ids();
        tokenizer.tokenize(cut, raw);
        int[] ids = new int[Math.min(raw.size, maxTokens)];
        int n = 0;
        for (int i = 0; i < raw.size && n < maxTokens; i++) {
            int id = raw.data[i];
            if (id >= 0 && id < special.length && !special[id]) {
                ids[n++] = id;
            }
        }
        if (n == 0) {
            String what = text.strip().isEmpty() ? "is empty" : "has no tokens after tokenization";
            throw new QueryTextException("query " + Manifest.show(text) + " " + what
                + "; LightRetriever needs at least one non-special token to build a query vector");
        }
        if (n < ids.length) {
            ids = java.util.Arrays.copyOf(ids, n);
        }
        return new EncodedQuery(dense(ids), sparse(ids), ids);
    }

    private String cut(String text) {
        if (text.length() <= maxChars || text.codePointCount(0, text.length()) <= maxChars) {
            return text;
        }
        return text.substring(0, text.offsetByCodePoints(0, maxChars));
    }

    private static void checkSurrogates(String text) {
        int position = 0;
        for (int i = 0; i < text.length(); position++) {
            int cp = text.codePointAt(i);
            if (cp >= Character.MIN_SURROGATE && cp <= Character.MAX_SURROGATE) {
                throw new QueryTextException(String.format(
                    "the query is not valid Unicode: a lone surrogate U+%04X at character %d; "
                        + "decode the client's input properly (or replace it) first", cp, position));
            }
            i += Character.charCount(cp);
        }
    }

    /** float32 sum of rows in position order (the first row copied, as numpy does), / count. */
    private float[] dense(int[] ids) {
        float[] acc = new float[dim];
        System.arraycopy(table, ids[0] * dim, acc, 0, dim);
        for (int t = 1; t < ids.length; t++) {
            int base = ids[t] * dim;
            for (int j = 0; j < dim; j++) {
                acc[j] += table[base + j];
            }
        }
        float count = (float) ids.length;
        for (int j = 0; j < dim; j++) {
            acc[j] /= count;
        }
        return acc;
    }

    private Map<String, Double> sparse(int[] ids) {
        Map<String, Double> out = new LinkedHashMap<>();
        for (int id : ids) {
            if (sparseKeep != null && !sparseKeep[id]) {
                continue;
            }
            String key = keys[id];
            if (idf != null) {
                out.putIfAbsent(key, idf[id]);
            } else {
                out.merge(key, 1.0, Double::sum);
            }
        }
        return out;
    }

    /** The tokenizer (for EncodeMain's normaliser check). */
    BertWordPiece tokenizer() {
        return tokenizer;
    }

    /** The bundle id the parts were exported from (the index {@code _meta} records it). */
    public String bundleId() {
        return bundleId;
    }

    /** Length of the dense vector (the bundle's served_dim). */
    public int dim() {
        return dim;
    }

    /** Tokens kept per query (the first ones). */
    public int maxTokens() {
        return maxTokens;
    }

    /** Estimated bytes this model holds on the heap (table, weights, vocabulary, keys). */
    public long memoryBytes() {
        return memoryBytes;
    }
}
