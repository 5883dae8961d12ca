package org.lightretriever.opensearch;

import java.util.ArrayList;
import java.util.Arrays;
import java.util.Collections;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.TreeSet;

/**
 * The body of {@code POST /<index>/_lightretriever}, checked once: every bad field is a 400
 * that names the field, what it got and what to send (the rules of {@code lr search}'s
 * {@code SearchOptions}).
 */
final class SearchBody {
    static final List<String> FIELDS = Arrays.asList(
        "text", "size", "from", "weights", "mode", "candidates", "filter", "explain", "_source", "semantics",
        "normalization", "combination", "rank_constant");
    static final String HYBRID = "hybrid";
    /** The most hits a search may ask the engine for (index.max_result_window, knn k). */
    static final int MAX_RESULT_WINDOW = 10_000;
    static final String EXAMPLE = "{\"text\": \"what is hybrid search\", \"size\": 10}";

    final String text;
    final int size;
    final int from;
    final Map<String, Double> weights; // null: the index record's
    final String mode;
    final Integer candidates; // null: the index record's
    final List<Map<String, Object>> filter; // empty: none
    final boolean explain;
    final boolean source; // false: the hits without _source (no multi-get), as lr search's source=False
    final String semantics; // null: the record's (as the normalization and combination)
    final String normalization;
    final String combination;
    final Integer rankConstant;

    private SearchBody(Map<String, Object> body) {
        TreeSet<String> unknown = new TreeSet<>(body.keySet());
        unknown.removeAll(FIELDS);
        if (!unknown.isEmpty()) {
            throw LrError.badRequest("unknown field(s) " + unknown + " in the request body; valid fields: "
                + String.join(", ", FIELDS) + " (e.g. " + EXAMPLE + ")");
        }
        Object t = body.get("text");
        if (!(t instanceof String)) {
            throw LrError.badRequest("the request body needs \"text\", the query text as a string"
                + (t == null ? "" : ", got " + describe(t)) + "; e.g. " + EXAMPLE);
        }
        text = (String) t;
        if (text.trim().isEmpty()) {
            throw LrError.badRequest("\"text\" is empty; send the query text, e.g. " + EXAMPLE);
        }
        size = integer(body, "size", 10, 1);
        from = integer(body, "from", 0, 0);
        if ((long) from + size > MAX_RESULT_WINDOW) {
            throw LrError.badRequest("from + size = " + ((long) from + size) + " is more than "
                + MAX_RESULT_WINDOW + ", the most hits a search may ask the engine for; ask for fewer");
        }
        candidates = body.containsKey("candidates") ? integer(body, "candidates", 0, 1) : null;
        if (candidates != null && candidates > MAX_RESULT_WINDOW) {
            throw LrError.badRequest("candidates = " + candidates + " is more than " + MAX_RESULT_WINDOW
                + ", the most hits a leg may ask the engine for (knn k); ask for fewer");
        }
        Object m = body.getOrDefault("mode", HYBRID);
        if (!(m instanceof String)) {
            throw LrError.badRequest("\"mode\" must be a string (hybrid or one leg's name), got " + describe(m));
        }
        mode = (String) m;
        weights = weights(body.get("weights"));
        if (weights != null && !HYBRID.equals(mode)) {
            throw LrError.badRequest("\"weights\" fuse the legs of mode hybrid; mode " + mode
                + " searches one leg alone: drop \"weights\" or \"mode\"");
        }
        filter = filter(body.get("filter"));
        Object e = body.getOrDefault("explain", false);
        if (!(e instanceof Boolean)) {
            throw LrError.badRequest("\"explain\" must be true or false, got " + describe(e));
        }
        explain = (Boolean) e;
        Object src = body.getOrDefault("_source", true);
        if (!(src instanceof Boolean)) {
            throw LrError.badRequest("\"_source\" must be true (the hits' documents, the default) or false (ids and "
                + "scores only), got " + describe(src));
        }
        source = (Boolean) src;
        semantics = string(body, "semantics");
        normalization = string(body, "normalization");
        combination = string(body, "combination");
        rankConstant = body.containsKey("rank_constant") ? integer(body, "rank_constant", 0, 1) : null;
        if (rankConstant != null && rankConstant > 10_000) {
            throw LrError.badRequest("\"rank_constant\" must be an integer in [1, 10000], got " + rankConstant);
        }
    }

    private static String string(Map<String, Object> body, String name) {
        Object v = body.get(name);
        if (v != null && !(v instanceof String)) {
            throw LrError.badRequest("\"" + name + "\" must be a string, got " + describe(v));
        }
        return (String) v;
    }

    static SearchBody parse(Map<String, Object> body) {
        return new SearchBody(body);
    }

    private static int integer(Map<String, Object> body, String name, int fallback, int minimum) {
        Object v = body.get(name);
        if (v == null) {
            return fallback;
        }
        if (!(v instanceof Integer) || (Integer) v < minimum) {
            throw LrError.badRequest("\"" + name + "\" must be an integer >= " + minimum + ", got " + describe(v));
        }
        return (Integer) v;
    }

    private static Map<String, Double> weights(Object value) {
        if (value == null) {
            return null;
        }
        String example = "e.g. \"weights\": {\"dense\": 0.4, \"sparse\": 0.2, \"bm25\": 0.4}";
        if (!(value instanceof Map)) {
            throw LrError.badRequest("\"weights\" must be an object {leg: weight}, got " + describe(value) + "; " + example);
        }
        Map<String, Double> out = new LinkedHashMap<>();
        for (Map.Entry<?, ?> entry : ((Map<?, ?>) value).entrySet()) {
            Object w = entry.getValue();
            if (!(w instanceof Number)) {
                throw LrError.badRequest("weight of " + entry.getKey() + " must be a number, got " + describe(w) + "; " + example);
            }
            out.put(String.valueOf(entry.getKey()), ((Number) w).doubleValue());
        }
        return out;
    }

    @SuppressWarnings("unchecked")
    private static List<Map<String, Object>> filter(Object value) {
        if (value == null) {
            return Collections.emptyList();
        }
        String how = "\"filter\" must be a query clause (an object) or a list of clauses, e.g. "
            + "{\"term\": {\"metadata.lang\": \"en\"}}; got ";
        if (value instanceof Map) {
            return Collections.singletonList((Map<String, Object>) value);
        }
        if (value instanceof List) {
            List<Map<String, Object>> out = new ArrayList<>();
            for (Object clause : (List<?>) value) {
                if (!(clause instanceof Map)) {
                    throw LrError.badRequest(how + "a list holding " + describe(clause));
                }
                out.add((Map<String, Object>) clause);
            }
            return out;
        }
        throw LrError.badRequest(how + describe(value));
    }

    static String describe(Object v) {
        if (v == null) {
            return "null";
        }
        String shown = v instanceof String ? "\"" + v + "\"" : String.valueOf(v);
        if (shown.length() > 80) {
            shown = shown.substring(0, 77) + "...";
        }
        return shown + " (" + (v instanceof Map ? "object" : v instanceof List ? "list" : v.getClass().getSimpleName()) + ")";
    }
}
