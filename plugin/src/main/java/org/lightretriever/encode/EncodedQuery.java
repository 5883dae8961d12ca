package org.lightretriever.encode;

import java.util.Map;

/**
 * One encoded query, as {@code lr_opensearch.query.encoder.EncodedQuery}.
 *
 * <p>{@code dense}: [dim] float32 mean of the table rows of the tokens; {@code sparse}: lrk1
 * key -> weight (IDF, or the token's count), in order of first occurrence; {@code tokenIds}:
 * the ids that made the vectors (no special tokens, after the cap). Treat all as read-only.
 */
public final class EncodedQuery {
    public final float[] dense;
    public final Map<String, Double> sparse;
    public final int[] tokenIds;

    public EncodedQuery(float[] dense, Map<String, Double> sparse, int[] tokenIds) {
        this.dense = dense;
        this.sparse = sparse;
        this.tokenIds = tokenIds;
    }
}
