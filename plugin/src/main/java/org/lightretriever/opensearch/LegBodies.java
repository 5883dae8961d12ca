package org.lightretriever.opensearch;

import java.util.ArrayList;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.TreeMap;
import java.util.regex.Matcher;
import java.util.regex.Pattern;

import org.lightretriever.encode.EncodedQuery;

/**
 * A leg's search body from its template (rendered by the leg's own definition in Python,
 * {@code lr_opensearch.plugin.templates}): the markers replaced by one query's inputs.
 */
final class LegBodies {
    static final String SIZE = "@lr:size";
    static final String K = "@lr:k";
    static final String VECTOR = "@lr:vector";
    static final String FILTER = "@lr:filter";
    static final String TOKEN = "@lr:token";
    static final String WEIGHT = "@lr:weight";
    static final String TEXT = "@lr:text";
    static final String QUERY_VECTOR = "query_vector";
    static final String TOKEN_WEIGHTS = "token_weights";

    // engine.clauses._TERM_PIECE: a CJK ideograph or kana alone, a run of letters and digits, any
    // other symbol alone (Python's str patterns are Unicode-aware: UNICODE_CHARACTER_CLASS)
    private static final String CJK = "\\u3040-\\u30ff\\u3400-\\u4dbf\\u4e00-\\u9fff\\uf900-\\ufaff\\x{20000}-\\x{3134f}";
    private static final Pattern TERM_PIECE = Pattern.compile(
        "[" + CJK + "]|[^\\W_" + CJK + "]+|[^\\w\\s!-/:-@\\[-`{-~\\u2000-\\u206f\\u3000-\\u303f]",
        Pattern.UNICODE_CHARACTER_CLASS);

    private LegBodies() {
    }

    /** Where to cut ``text`` so that the engine makes at most ``maxTerms`` terms of it. */
    static int textCut(String text, int maxTerms) {
        Matcher m = TERM_PIECE.matcher(text);
        int n = 0;
        while (m.find()) {
            if (n == maxTerms) {
                return m.start();
            }
            n++;
        }
        return text.length();
    }

    /** The leg's body for one query. */
    @SuppressWarnings("unchecked")
    static Map<String, Object> body(Map<String, Object> leg, EncodedQuery query, String text, int size, int k,
                                    List<Map<String, Object>> filter, int textMaxTerms) {
        String input = (String) leg.get("input");
        Map<String, Object> bodies = (Map<String, Object>) leg.get("bodies");
        boolean empty = TOKEN_WEIGHTS.equals(input) && positive(query.sparse).isEmpty();
        String variant = (empty ? "empty" : "") + (filter.isEmpty() ? (empty ? "" : "plain") : (empty ? "_filtered" : "filtered"));
        Object template = bodies.get(variant);
        if (template == null) {
            throw new IllegalStateException("the plugin record has no " + variant + " body for a leg of input " + input);
        }
        Object vector = null;
        if (QUERY_VECTOR.equals(input)) {
            List<Float> values = new ArrayList<>(query.dense.length);
            for (float v : query.dense) {
                values.add(v);
            }
            vector = values;
        }
        String cut = text.substring(0, textCut(text, textMaxTerms));
        Fill fill = new Fill(size, k, vector, positive(query.sparse), cut, filter);
        return (Map<String, Object>) fill.apply(template);
    }

    /** The sparse query's keys of weight > 0, sorted by key (engine.clauses.rank_feature_clauses). */
    static TreeMap<String, Double> positive(Map<String, Double> sparse) {
        TreeMap<String, Double> out = new TreeMap<>();
        for (Map.Entry<String, Double> e : sparse.entrySet()) {
            if (e.getValue() > 0.0) {
                out.put(e.getKey(), e.getValue());
            }
        }
        return out;
    }

    /** One query's inputs, put where the markers are. */
    private static final class Fill {
        final int size;
        final int k;
        final Object vector;
        final TreeMap<String, Double> tokens;
        final String text;
        final List<Map<String, Object>> filter;

        Fill(int size, int k, Object vector, TreeMap<String, Double> tokens, String text, List<Map<String, Object>> filter) {
            this.size = size;
            this.k = k;
            this.vector = vector;
            this.tokens = tokens;
            this.text = text;
            this.filter = filter;
        }

        Object apply(Object node) {
            return apply(node, null, 0.0);
        }

        private Object apply(Object node, String token, double weight) {
            if (node instanceof Map) {
                Map<?, ?> map = (Map<?, ?>) node;
                if (isFilter(map)) {
                    return oneFilter();
                }
                Map<String, Object> out = new LinkedHashMap<>();
                for (Map.Entry<?, ?> e : map.entrySet()) {
                    out.put(String.valueOf(e.getKey()), apply(e.getValue(), token, weight));
                }
                return out;
            }
            if (node instanceof List) {
                List<Object> out = new ArrayList<>();
                for (Object item : (List<?>) node) {
                    if (item instanceof Map && isFilter((Map<?, ?>) item)) {
                        out.addAll(filter);
                    } else if (token == null && holds(item, TOKEN)) {
                        for (Map.Entry<String, Double> t : tokens.entrySet()) {
                            out.add(apply(item, t.getKey(), t.getValue()));
                        }
                    } else {
                        out.add(apply(item, token, weight));
                    }
                }
                return out;
            }
            if (node instanceof String) {
                String s = (String) node;
                switch (s) {
                    case SIZE: return size;
                    case K: return k;
                    case VECTOR: return vector;
                    case TEXT: return text;
                    case WEIGHT: return weight;
                    default: return token != null && s.contains(TOKEN) ? s.replace(TOKEN, token) : s;
                }
            }
            return node;
        }

        private Object oneFilter() {
            if (filter.size() == 1) {
                return filter.get(0);
            }
            Map<String, Object> bool = new LinkedHashMap<>();
            bool.put("filter", filter);
            Map<String, Object> out = new LinkedHashMap<>();
            out.put("bool", bool);
            return out;
        }

        private static boolean isFilter(Map<?, ?> map) {
            return map.size() == 1 && map.containsKey(FILTER);
        }

        private static boolean holds(Object node, String marker) {
            if (node instanceof String) {
                return ((String) node).contains(marker);
            }
            if (node instanceof Map) {
                for (Object v : ((Map<?, ?>) node).values()) {
                    if (holds(v, marker)) {
                        return true;
                    }
                }
            } else if (node instanceof List) {
                for (Object v : (List<?>) node) {
                    if (holds(v, marker)) {
                        return true;
                    }
                }
            }
            return false;
        }
    }
}
