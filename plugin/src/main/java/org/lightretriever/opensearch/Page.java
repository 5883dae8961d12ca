package org.lightretriever.opensearch;

import java.util.ArrayList;
import java.util.HashMap;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;

import org.opensearch.action.get.MultiGetItemResponse;
import org.opensearch.action.get.MultiGetRequest;
import org.opensearch.core.action.ActionListener;
import org.opensearch.search.SearchHit;
import org.opensearch.search.fetch.subphase.FetchSourceContext;

/**
 * The answer of one search in the shape of {@code _search}: the legs fused (hybrid) or the
 * one leg's hits, cut to {@code [from, from + size)}, their {@code _source} (the vector fields
 * left out) fetched in one multi-get, each leg's scores under {@code _explanation}.
 */
final class Page {
    private final Cluster cluster;
    private final IndexRecord record;
    private final SearchAction.Plan plan;
    private final SearchBody body;
    private final Timings timings;

    Page(Cluster cluster, IndexRecord record, SearchAction.Plan plan, SearchBody body, Timings timings) {
        this.cluster = cluster;
        this.record = record;
        this.plan = plan;
        this.body = body;
        this.timings = timings;
    }

    /** A score as the client reads it from JSON: the float's shortest decimal, as a double. */
    static double read(float score) {
        return Double.parseDouble(Float.toString(score));
    }

    /** ``engine.scores.inner_product_from_score``. */
    static double innerProduct(double score) {
        return score >= 1.0 ? score - 1.0 : 1.0 - 1.0 / score;
    }

    private double reads(String leg, double engineScore) {
        return "inner_product".equals(record.legs.get(leg).get("score")) ? innerProduct(engineScore) : engineScore;
    }

    void answer(List<List<SearchHit>> perLeg, ActionListener<Map<String, Object>> listener) {
        Map<String, SearchHit> byKey = new HashMap<>();
        List<Map<String, Object>> hits = new ArrayList<>();
        int total;
        if (plan.hybrid) {
            List<List<Fusion.LegHit>> lists = new ArrayList<>();
            boolean linear = "linear".equals(plan.semantics);
            for (int j = 0; j < perLeg.size(); j++) {
                String leg = plan.legs.get(j);
                boolean transform = linear && Boolean.TRUE.equals(record.legs.get(leg).get("linear_reads_score"));
                List<Fusion.LegHit> list = new ArrayList<>();
                for (SearchHit h : perLeg.get(j)) {
                    String key = h.getIndex() + "#" + h.getId();
                    byKey.putIfAbsent(key, h);
                    double s = read(h.getScore());
                    list.add(new Fusion.LegHit(key, transform ? innerProduct(s) : s));
                }
                lists.add(list);
            }
            List<Fusion.Row> rows = Fusion.fuse(lists, plan.weights, plan.semantics, plan.normalization,
                plan.combination, plan.rankConstant);
            total = rows.size();
            Map<String, Map<String, Double>> engine = engineScores(perLeg);
            for (Fusion.Row row : rows.subList(Math.min(body.from, rows.size()), Math.min(body.from + body.size, rows.size()))) {
                Object score = linear ? (Object) row.fused : (Object) (float) row.fused;
                hits.add(hit(byKey.get(row.key), score, row.fused, engine.get(row.key), row.norm, row.rank));
            }
        } else {
            List<SearchHit> leg = perLeg.get(0);
            total = leg.size();
            String name = plan.legs.get(0);
            for (int pos = body.from; pos < Math.min(body.from + body.size, leg.size()); pos++) {
                SearchHit h = leg.get(pos);
                double engineScore = read(h.getScore());
                Map<String, Double> engine = new HashMap<>();
                engine.put(name, engineScore);
                hits.add(hit(h, reads(name, engineScore), null, engine, new Double[] {null}, new Integer[] {pos + 1}));
            }
        }
        timings.fused();
        fetchSources(hits, total, listener);
    }

    private Map<String, Map<String, Double>> engineScores(List<List<SearchHit>> perLeg) {
        Map<String, Map<String, Double>> out = new HashMap<>();
        for (int j = 0; j < perLeg.size(); j++) {
            for (SearchHit h : perLeg.get(j)) {
                out.computeIfAbsent(h.getIndex() + "#" + h.getId(), key -> new HashMap<>()).put(plan.legs.get(j), read(h.getScore()));
            }
        }
        return out;
    }

    private Map<String, Object> hit(SearchHit h, Object score, Double fused, Map<String, Double> engine, Double[] norm,
                                    Integer[] rank) {
        Map<String, Object> out = new LinkedHashMap<>();
        out.put("_index", h.getIndex());
        out.put("_id", h.getId());
        out.put("_score", score);
        if (body.explain) {
            Map<String, Object> legs = new LinkedHashMap<>();
            for (int j = 0; j < plan.legs.size(); j++) {
                String leg = plan.legs.get(j);
                Double raw = engine.get(leg);
                Map<String, Object> one = new LinkedHashMap<>();
                one.put("engine_score", raw);
                one.put("score", raw == null ? null : reads(leg, raw));
                one.put("norm", norm[j]);
                one.put("rank", rank[j]);
                legs.put(leg, one);
            }
            Map<String, Object> explanation = new LinkedHashMap<>();
            explanation.put("fused", fused);
            explanation.put("weights", plan.shownWeights);
            explanation.put("legs", legs);
            out.put("_explanation", explanation);
        }
        return out;
    }

    private void fetchSources(List<Map<String, Object>> hits, int total, ActionListener<Map<String, Object>> listener) {
        if (hits.isEmpty() || !body.source) {
            listener.onResponse(response(hits, total));
            return;
        }
        MultiGetRequest mget = new MultiGetRequest().realtime(false);
        FetchSourceContext source = new FetchSourceContext(true, null, new String[] {record.denseField, record.sparseField});
        for (Map<String, Object> h : hits) {
            mget.add(new MultiGetRequest.Item((String) h.get("_index"), (String) h.get("_id")).fetchSourceContext(source));
        }
        cluster.multiGet(mget, ActionListener.wrap(response -> {
            MultiGetItemResponse[] items = response.getResponses();
            for (int i = 0; i < hits.size(); i++) {
                MultiGetItemResponse item = items[i];
                if (!item.isFailed() && item.getResponse().isExists()) {
                    hits.get(i).put("_source", item.getResponse().getSourceAsMap());
                }
            }
            listener.onResponse(response(hits, total));
        }, listener::onFailure));
    }

    private Map<String, Object> response(List<Map<String, Object>> hits, int total) {
        Map<String, Object> totalHits = new LinkedHashMap<>();
        totalHits.put("value", total);
        totalHits.put("relation", "gte");
        Map<String, Object> inner = new LinkedHashMap<>();
        inner.put("total", totalHits);
        inner.put("max_score", hits.isEmpty() ? null : hits.get(0).get("_score"));
        inner.put("hits", hits);
        Map<String, Object> out = new LinkedHashMap<>();
        Map<String, Object> phases = timings.asMap();
        out.put("took", timings.tookMillis());
        out.put("timed_out", false);
        out.put("hits", inner);
        Map<String, Object> lr = new LinkedHashMap<>();
        lr.put("bundle_id", record.bundleId);
        lr.put("mode", body.mode);
        lr.put("legs", plan.legs);
        lr.put("weights", plan.shownWeights);
        lr.put("candidates", plan.candidates);
        lr.put("timings", phases);
        out.put("lightretriever", lr);
        return out;
    }
}
