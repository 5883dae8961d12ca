package org.lightretriever.opensearch;

import java.math.BigDecimal;
import java.math.RoundingMode;
import java.util.ArrayList;
import java.util.Comparator;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;

/**
 * The fusion of {@code lr search} ({@code lr_opensearch.search.fusion.fuse_many}), line for line:
 * the {@code opensearch} semantics in float32 as neural-search computes it (min-max with 0 ->
 * 0.001 and all-equal -> 1, l2, RRF rounded to 10 decimals; arithmetic, geometric, harmonic
 * means with a missing document's 0), the {@code linear} semantics in float64. Ties: fused
 * score descending, then the key ({@code index#_id}) ascending by code point.
 */
final class Fusion {
    static final float MIN_SCORE = 0.001f;
    static final double LINEAR_EPS = 1e-8;

    /** One hit of one leg. */
    static final class LegHit {
        final String key;
        final double score;

        LegHit(String key, double score) {
            this.key = key;
            this.score = score;
        }
    }

    /** One fused document: per leg (null: the leg did not return it) raw, normalised, rank. */
    static final class Row {
        final String key;
        final double fused;
        final Double[] raw;
        final Double[] norm;
        final Integer[] rank;

        Row(String key, int legs) {
            this.key = key;
            this.fused = 0.0;
            this.raw = new Double[legs];
            this.norm = new Double[legs];
            this.rank = new Integer[legs];
        }

        private Row(Row other, double fused) {
            this.key = other.key;
            this.fused = fused;
            this.raw = other.raw;
            this.norm = other.norm;
            this.rank = other.rank;
        }
    }

    private Fusion() {
    }

    static List<Row> fuse(List<List<LegHit>> results, double[] weights, String semantics, String normalization,
                          String combination, int rankConstant) {
        boolean opensearch = "opensearch".equals(semantics);
        String method = "rrf".equals(combination) ? "rrf" : normalization;
        int n = results.size();
        Map<String, Row> table = new LinkedHashMap<>();
        for (int j = 0; j < n; j++) {
            List<LegHit> ranked = new ArrayList<>(results.get(j));
            ranked.sort(Comparator.comparingDouble((LegHit h) -> -h.score)); // stable
            double[] raw = new double[ranked.size()];
            for (int i = 0; i < raw.length; i++) {
                raw[i] = ranked.get(i).score;
            }
            double[] normed = opensearch ? normalizeOpenSearch(raw, method, rankConstant) : normalizeLinear(raw, method, rankConstant);
            for (int pos = 0; pos < raw.length; pos++) {
                Row row = table.computeIfAbsent(ranked.get(pos).key, key -> new Row(key, n));
                row.raw[j] = raw[pos];
                row.norm[j] = normed[pos];
                row.rank[j] = pos + 1;
            }
        }
        float[] weights32 = new float[n];
        for (int j = 0; j < n; j++) {
            weights32[j] = (float) weights[j];
        }
        List<Row> out = new ArrayList<>(table.size());
        for (Row row : table.values()) {
            double fused;
            if (opensearch) {
                float[] values = new float[n];
                for (int j = 0; j < n; j++) {
                    values[j] = row.norm[j] == null ? 0.0f : (float) (double) row.norm[j];
                }
                fused = combineOpenSearch(values, weights32, combination);
            } else {
                fused = 0.0;
                for (int j = 0; j < n; j++) {
                    if (row.norm[j] != null) {
                        fused += weights[j] * row.norm[j];
                    }
                }
            }
            out.add(new Row(row, fused));
        }
        out.sort((a, b) -> a.fused != b.fused ? Double.compare(b.fused, a.fused) : codePoints(a.key, b.key));
        return out;
    }

    /** Python's str order (code points), not Java's UTF-16 units. */
    static int codePoints(String a, String b) {
        int i = 0;
        int j = 0;
        while (i < a.length() && j < b.length()) {
            int ca = a.codePointAt(i);
            int cb = b.codePointAt(j);
            if (ca != cb) {
                return Integer.compare(ca, cb);
            }
            i += Character.charCount(ca);
            j += Character.charCount(cb);
        }
        return Integer.compare(a.length() - i, b.length() - j);
    }

    static double rrfTerm(int position, int rankConstant) {
        return BigDecimal.ONE.divide(BigDecimal.valueOf((long) rankConstant + position + 1), 10, RoundingMode.HALF_UP).doubleValue();
    }

    static double[] normalizeOpenSearch(double[] scores, String method, int rankConstant) {
        int n = scores.length;
        double[] out = new double[n];
        if (n == 0) {
            return out;
        }
        float[] s = new float[n];
        for (int i = 0; i < n; i++) {
            s[i] = (float) scores[i];
        }
        if ("rrf".equals(method)) {
            for (int p = 0; p < n; p++) {
                out[p] = (float) rrfTerm(p, rankConstant);
            }
            return out;
        }
        if ("l2".equals(method)) {
            float norm = 0.0f;
            for (float v : s) {
                norm = norm + v * v;
            }
            norm = (float) Math.sqrt(norm);
            for (int i = 0; i < n; i++) {
                out[i] = norm == 0.0f ? 0.0f : s[i] / norm;
            }
            return out;
        }
        float lo = s[0];
        float hi = s[0];
        for (float v : s) {
            lo = Math.min(lo, v);
            hi = Math.max(hi, v);
        }
        float range = hi - lo;
        for (int i = 0; i < n; i++) {
            float v = hi == lo ? 1.0f : (s[i] - lo) / range;
            out[i] = v == 0.0f ? MIN_SCORE : v;
        }
        return out;
    }

    static double[] normalizeLinear(double[] s, String method, int rankConstant) {
        int n = s.length;
        double[] out = new double[n];
        if (n == 0) {
            return out;
        }
        if ("rrf".equals(method)) {
            for (int p = 0; p < n; p++) {
                out[p] = 1.0 / (rankConstant + p + 1);
            }
            return out;
        }
        if ("l2".equals(method)) {
            double sum = 0.0;
            for (double v : s) {
                sum += v * v;
            }
            double norm = Math.sqrt(sum);
            for (int i = 0; i < n; i++) {
                out[i] = norm == 0.0 ? 0.0 : s[i] / norm;
            }
            return out;
        }
        double lo = s[0];
        double hi = s[0];
        for (double v : s) {
            lo = Math.min(lo, v);
            hi = Math.max(hi, v);
        }
        for (int i = 0; i < n; i++) {
            out[i] = (s[i] - lo) / (hi - lo + LINEAR_EPS);
        }
        return out;
    }

    static double combineOpenSearch(float[] row, float[] weights, String combination) {
        float total = 0.0f;
        float wsum = 0.0f;
        if ("arithmetic_mean".equals(combination) || "rrf".equals(combination)) {
            for (int j = 0; j < row.length; j++) {
                if (row[j] >= 0.0f) {
                    total = total + row[j] * weights[j];
                    wsum = wsum + weights[j];
                }
            }
            if (wsum == 0.0f) {
                return 0.0;
            }
            return "rrf".equals(combination) ? total : total / wsum;
        }
        if ("geometric_mean".equals(combination)) {
            for (int j = 0; j < row.length; j++) {
                if (row[j] > 0.0f) {
                    wsum = wsum + weights[j];
                    total = (float) ((double) total + (double) weights[j] * Math.log(row[j]));
                }
            }
            return wsum == 0.0f ? 0.0 : (float) Math.exp(total / wsum);
        }
        for (int j = 0; j < row.length; j++) { // harmonic_mean
            if (row[j] > 0.0f) {
                wsum = wsum + weights[j];
                total = total + weights[j] / row[j];
            }
        }
        return total > 0.0f ? wsum / total : 0.0;
    }
}
