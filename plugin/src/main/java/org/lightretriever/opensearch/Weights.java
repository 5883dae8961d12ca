package org.lightretriever.opensearch;

import java.util.Map;

/** The check of {@code lr_opensearch.legs.weights.validate_weights}: the same rules, the same words. */
final class Weights {
    static final double SUM_TOLERANCE = 0.01; // neural-search's tolerance on sum(weights) == 1
    static final String EXAMPLE = "{\"dense\": 0.4, \"sparse\": 0.2, \"bm25\": 0.4}";

    private Weights() {
    }

    static void check(Map<String, Double> weights, String semantics) {
        double total = 0.0;
        for (double w : weights.values()) {
            if (!Double.isFinite(w) || w < 0.0) {
                throw LrError.badRequest("weights must be finite and >= 0, got " + weights + "; e.g. " + EXAMPLE);
            }
            total += w;
        }
        if (total == 0.0) {
            throw LrError.badRequest("weights must not all be 0, got " + weights + "; e.g. " + EXAMPLE);
        }
        if ("opensearch".equals(semantics)) {
            for (double w : weights.values()) {
                if (w > 1.0) {
                    throw LrError.badRequest("opensearch semantics: each weight must be in [0, 1], got " + weights
                        + "; e.g. " + EXAMPLE);
                }
            }
            if (Math.abs(total - 1.0) > SUM_TOLERANCE) {
                throw LrError.badRequest("opensearch semantics: weights must sum to 1 (the normalization-processor "
                    + "rejects others), got " + weights + " (sum " + total + "); e.g. " + EXAMPLE);
            }
        }
    }
}
