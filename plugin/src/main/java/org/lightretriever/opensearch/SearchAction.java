package org.lightretriever.opensearch;

import java.io.IOException;
import java.util.ArrayList;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;

import org.lightretriever.encode.EncodedQuery;
import org.lightretriever.encode.QueryModel;
import org.lightretriever.encode.QueryTextException;
import org.opensearch.action.admin.indices.get.GetIndexRequest;
import org.opensearch.action.search.MultiSearchRequest;
import org.opensearch.action.search.MultiSearchResponse;
import org.opensearch.action.search.SearchRequest;
import org.opensearch.action.search.SearchResponse;
import org.opensearch.action.search.ShardSearchFailure;
import org.opensearch.common.xcontent.LoggingDeprecationHandler;
import org.opensearch.common.xcontent.json.JsonXContent;
import org.opensearch.core.action.ActionListener;
import org.opensearch.core.xcontent.NamedXContentRegistry;
import org.opensearch.core.xcontent.XContentBuilder;
import org.opensearch.core.xcontent.XContentParser;
import org.opensearch.index.IndexNotFoundException;
import org.opensearch.search.SearchHit;
import org.opensearch.search.builder.SearchSourceBuilder;

/**
 * One {@code _lightretriever} search: the target's record, the bundle's model, the query
 * encoded in the node, each leg as its own search in one multi-search (each prunes on its
 * own), fused as {@code lr search} fuses ({@link Fusion}), the page's sources fetched
 * ({@link Page}).
 */
final class SearchAction {
    /** ``lr_opensearch.query.tokens.CHARS_PER_TOKEN_CAP``: the client cuts longer texts. */
    static final int CHARS_PER_TOKEN_CAP = 50;

    private final Cluster cluster;
    private final ModelStore store;
    private final NamedXContentRegistry registry;
    private final String target;
    private final SearchBody body;
    private final Timings timings = new Timings(System.nanoTime());

    SearchAction(Cluster cluster, ModelStore store, NamedXContentRegistry registry, String target, SearchBody body) {
        this.cluster = cluster;
        this.store = store;
        this.registry = registry;
        this.target = target;
        this.body = body;
    }

    /** The target's names (``a,b``, an alias, a pattern), refusing an empty one as {@code lr search} does. */
    static String[] indices(String target) {
        String[] names = target.split(",", -1);
        for (String name : names) {
            if (name.trim().isEmpty()) {
                throw LrError.badRequest("index target " + IndexRecord.quote(target) + " has an empty index name (the "
                    + "engine reads ',' or an empty name as every index); name the indices: /a/_lightretriever or "
                    + "/a,b/_lightretriever (or a pattern such as docs-*)");
            }
        }
        return names;
    }

    void run(ActionListener<Map<String, Object>> listener) {
        // local: this node's cluster state, no hop to the cluster manager on every search
        GetIndexRequest request = new GetIndexRequest().indices(indices(target)).local(true)
            .features(GetIndexRequest.Feature.MAPPINGS, GetIndexRequest.Feature.SETTINGS);
        cluster.getIndex(request, ActionListener.wrap(response -> {
            IndexRecord record = IndexRecord.of(target, response);
            Plan plan = Plan.of(record, body);
            store.get(cluster, record.bundleId, record.modelDigest,
                ActionListener.wrap(entry -> search(record, plan, entry.model, listener), listener::onFailure));
        }, e -> listener.onFailure(e instanceof IndexNotFoundException ? LrError.notFound("index_not_found_exception",
            "index " + IndexRecord.quote(target) + " does not exist; create it with `lr index create --bundle BUNDLE --index "
                + target + "` or ingest into it") : e)));
    }

    private void search(IndexRecord record, Plan plan, QueryModel model, ActionListener<Map<String, Object>> listener)
        throws IOException {
        timings.resolved();
        int maxChars = model.maxTokens() * CHARS_PER_TOKEN_CAP;
        int chars = body.text.codePointCount(0, body.text.length());
        if (chars > maxChars) {
            throw LrError.badRequest("\"text\" has " + chars + " characters, more than the " + maxChars + " this bundle "
                + "encodes (max_tokens " + model.maxTokens() + " x " + CHARS_PER_TOKEN_CAP + "); send a shorter text");
        }
        EncodedQuery query;
        try {
            query = model.encode(body.text);
        } catch (QueryTextException e) {
            throw LrError.badRequest("\"text\" cannot be searched: " + e.getMessage()
                + "; send words the bundle's vocabulary knows");
        }
        timings.encoded();
        int pageEnd = body.from + body.size;
        int k = Math.max(plan.candidates, pageEnd);
        int size = plan.hybrid ? k : pageEnd;
        int shards = plan.hybrid && "opensearch".equals(plan.semantics) && record.shards > 1 ? record.shards : 0;
        MultiSearchRequest msearch = new MultiSearchRequest();
        for (String leg : plan.legs) {
            Map<String, Object> legBody = LegBodies.body(record.legs.get(leg), query, body.text, size, k, body.filter,
                record.textMaxTerms);
            SearchSourceBuilder source = parse(legBody);
            for (int shard = 0; shard < Math.max(1, shards); shard++) {
                SearchRequest one = new SearchRequest(indices(target)).source(source);
                if (shards > 0) {
                    one.preference("_shards:" + shard);
                }
                msearch.add(one);
            }
        }
        cluster.multiSearch(msearch, ActionListener.wrap(response -> {
            long[] took = new long[plan.legs.size()];
            List<List<SearchHit>> perLeg = legHits(response, plan.legs.size(), Math.max(1, shards), took);
            timings.searched(plan.legs, took);
            new Page(cluster, record, plan, body, timings).answer(perLeg, listener);
        }, listener::onFailure));
    }

    private SearchSourceBuilder parse(Map<String, Object> legBody) throws IOException {
        XContentBuilder json = JsonXContent.contentBuilder().map(legBody);
        try (XContentParser parser = JsonXContent.jsonXContent.createParser(registry, LoggingDeprecationHandler.INSTANCE,
            json.toString())) {
            SearchSourceBuilder source = SearchSourceBuilder.searchSource();
            source.parseXContent(parser, true);
            return source;
        } catch (RuntimeException e) {
            throw LrError.badRequest("the search of a leg cannot be built" + (body.filter.isEmpty() ? "" : " with this \"filter\"")
                + ": " + e.getMessage() + "; give \"filter\" as a query clause such as {\"term\": {\"field\": \"value\"}}");
        }
    }

    /** Per leg, its hits (the shards' lists merged, best score first, stable); its took (the slowest shard's) into ``took``. */
    private static List<List<SearchHit>> legHits(MultiSearchResponse response, int legs, int shards, long[] took) {
        MultiSearchResponse.Item[] items = response.getResponses();
        List<List<SearchHit>> out = new ArrayList<>();
        for (int j = 0; j < legs; j++) {
            List<SearchHit> hits = new ArrayList<>();
            for (int s = 0; s < shards; s++) {
                MultiSearchResponse.Item item = items[j * shards + s];
                if (item.isFailure()) {
                    throw Errors.asRuntime(item.getFailure());
                }
                SearchResponse one = item.getResponse();
                took[j] = Math.max(took[j], one.getTook().millis());
                if (one.getFailedShards() > 0) {
                    ShardSearchFailure f = one.getShardFailures()[0];
                    throw new LrError(f.status().getStatus(), "lightretriever_leg_failed", one.getFailedShards()
                        + " shard(s) failed searching a leg: " + f.reason());
                }
                for (SearchHit h : one.getHits().getHits()) {
                    hits.add(h);
                }
            }
            if (shards > 1) {
                hits.sort((a, b) -> Float.compare(b.getScore(), a.getScore()));
            }
            out.add(hits);
        }
        return out;
    }

    /** What to search: the legs (sub-query order), their weights, the candidates, the fusion. */
    static final class Plan {
        final boolean hybrid;
        final String semantics;
        final String normalization;
        final String combination;
        final int rankConstant;
        final List<String> legs = new ArrayList<>();
        final double[] weights;
        final int candidates;
        final Map<String, Double> shownWeights = new LinkedHashMap<>();

        private Plan(IndexRecord record, SearchBody body) {
            hybrid = SearchBody.HYBRID.equals(body.mode);
            candidates = body.candidates != null ? body.candidates : record.candidates;
            semantics = choice(record, "semantics", body.semantics, record.semantics);
            normalization = choice(record, "normalization", body.normalization, record.normalization);
            combination = choice(record, "combination", body.combination, record.combination);
            rankConstant = body.rankConstant != null ? body.rankConstant : record.rankConstant;
            if ("linear".equals(semantics) && ("geometric_mean".equals(combination) || "harmonic_mean".equals(combination))) {
                throw LrError.badRequest("semantics 'linear' is a weighted sum; combination must be 'arithmetic_mean' or "
                    + "'rrf', got '" + combination + "' (use semantics 'opensearch' for " + combination + ")");
            }
            if (!hybrid) {
                if (!record.legs.containsKey(body.mode)) {
                    throw LrError.badRequest("mode " + IndexRecord.quote(body.mode) + " is not a search mode of this index; "
                        + "valid modes: hybrid, " + String.join(", ", record.legs.keySet()));
                }
                legs.add(body.mode);
                weights = new double[] {1.0};
                return;
            }
            Map<String, Double> given = body.weights != null ? body.weights : record.weights;
            for (String name : given.keySet()) {
                if (!record.legs.containsKey(name)) {
                    throw LrError.badRequest("unknown leg " + IndexRecord.quote(name) + " in \"weights\"; valid legs: "
                        + String.join(", ", record.legs.keySet()));
                }
            }
            Weights.check(given, semantics);
            List<Double> ws = new ArrayList<>();
            for (String name : record.legs.keySet()) {
                double w = given.getOrDefault(name, 0.0);
                if (w > 0.0) {
                    legs.add(name);
                    ws.add(w);
                    shownWeights.put(name, w);
                }
            }
            weights = ws.stream().mapToDouble(Double::doubleValue).toArray();
        }

        static Plan of(IndexRecord record, SearchBody body) {
            return new Plan(record, body);
        }

        /** ``given`` (null: ``fallback``) if it is one of the record's valid values of ``name``. */
        private static String choice(IndexRecord record, String name, String given, String fallback) {
            String value = given != null ? given : fallback;
            List<String> valid = record.choices.get(name);
            if (valid != null && !valid.contains(value)) {
                throw LrError.badRequest("unknown " + name + " " + IndexRecord.quote(value) + "; valid: "
                    + String.join(", ", valid));
            }
            return value;
        }
    }
}
