package org.lightretriever.opensearch;

import java.util.ArrayList;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.TreeMap;

import org.opensearch.action.admin.indices.get.GetIndexResponse;
import org.opensearch.cluster.metadata.MappingMetadata;
import org.opensearch.common.settings.Settings;

/**
 * What a search target's mappings say: the LightRetriever {@code _meta} of every concrete index
 * (one bundle for all, as {@code lr search} demands), and the plugin record {@code lr plugin
 * load --index} wrote beside it ({@code _meta.lightretriever.plugin}: the bundle, its model
 * digest, the fusion settings and the legs' body templates).
 */
final class IndexRecord {
    static final String META_KEY = "lightretriever";
    static final String PLUGIN_KEY = "plugin";
    static final int FORMAT = 1;

    final String target;
    final String bundleId;
    final String modelDigest;
    final Map<String, Double> weights; // the bundle's weighted legs
    final String semantics;
    final String normalization;
    final String combination;
    final int rankConstant;
    final int candidates;
    final int textMaxTerms;
    final String denseField;
    final String sparseField;
    final Map<String, Map<String, Object>> legs; // leg -> {input, score, bodies}, in leg_order
    final int shards;
    final Map<String, List<String>> choices; // option -> its valid values (lr_opensearch.options)

    @SuppressWarnings("unchecked")
    private IndexRecord(String target, Map<String, Object> rec, int shards) {
        this.target = target;
        this.shards = shards;
        bundleId = String.valueOf(rec.get("bundle_id"));
        modelDigest = String.valueOf(rec.get("model_digest"));
        weights = new LinkedHashMap<>();
        for (Map.Entry<String, Object> e : ((Map<String, Object>) rec.get("weights")).entrySet()) {
            weights.put(e.getKey(), ((Number) e.getValue()).doubleValue());
        }
        semantics = (String) rec.get("semantics");
        normalization = (String) rec.get("normalization");
        combination = (String) rec.get("combination");
        rankConstant = ((Number) rec.get("rank_constant")).intValue();
        candidates = ((Number) rec.get("candidates")).intValue();
        textMaxTerms = ((Number) rec.get("text_query_max_terms")).intValue();
        denseField = (String) rec.get("dense_field");
        sparseField = (String) rec.get("sparse_field");
        // a mapping's _meta comes back with its objects' keys in no set order: the leg order
        // (the sub-query order lr search fuses in, float32 sums included) is a list
        Map<String, Map<String, Object>> byName = (Map<String, Map<String, Object>>) (Map<String, ?>) rec.get("legs");
        choices = new LinkedHashMap<>();
        Object given = rec.get("choices");
        if (given instanceof Map) {
            for (Map.Entry<String, Object> e : ((Map<String, Object>) given).entrySet()) {
                List<String> values = new ArrayList<>();
                for (Object v : (List<Object>) e.getValue()) {
                    values.add(String.valueOf(v));
                }
                choices.put(e.getKey(), values);
            }
        }
        legs = new LinkedHashMap<>();
        for (Object name : (List<Object>) rec.get("leg_order")) {
            legs.put(String.valueOf(name), byName.get(String.valueOf(name)));
        }
    }

    /** The record of ``target`` from its concrete indices' mappings and settings. */
    @SuppressWarnings("unchecked")
    static IndexRecord of(String target, GetIndexResponse response) {
        Map<String, Map<String, Object>> metas = new TreeMap<>();
        for (String name : response.indices()) {
            MappingMetadata mapping = response.mappings().get(name);
            Map<String, Object> source = mapping == null ? Map.of() : mapping.sourceAsMap();
            Object meta = source.get("_meta") instanceof Map ? ((Map<String, Object>) source.get("_meta")).get(META_KEY) : null;
            metas.put(name, meta instanceof Map ? (Map<String, Object>) meta : Map.of());
        }
        if (metas.isEmpty()) {
            throw LrError.notFound("index_not_found_exception", "no index matches " + quote(target)
                + "; create one with `lr index create --bundle BUNDLE --index NAME` or ingest into it");
        }
        List<String> plain = new ArrayList<>();
        TreeMap<String, String> ids = new TreeMap<>();
        for (Map.Entry<String, Map<String, Object>> e : metas.entrySet()) {
            if (e.getValue().isEmpty()) {
                plain.add(e.getKey());
            } else {
                ids.put(e.getKey(), String.valueOf(e.getValue().get("bundle_id")));
            }
        }
        if (!plain.isEmpty()) {
            throw LrError.badRequest("index " + quote(plain.get(0)) + " was not created by lr-opensearch (its mapping has no "
                + "_meta.lightretriever); search a LightRetriever index, or create one with `lr index create`");
        }
        if (ids.values().stream().distinct().count() > 1) {
            throw LrError.badRequest(quote(target) + " mixes indices built with different bundles " + ids
                + "; one search uses one bundle: search the indices of each bundle separately, or point the alias "
                + "at indices of one bundle");
        }
        String first = metas.keySet().iterator().next();
        Map<String, Object> meta = metas.get(first);
        Object rec = meta.get(PLUGIN_KEY);
        if (!(rec instanceof Map)) {
            throw LrError.notReady("lightretriever_not_loaded", "index " + quote(first) + " (bundle " + meta.get("bundle_id")
                + ") has no plugin record; run `lr plugin load --bundle BUNDLE --index " + first + "` once");
        }
        Map<String, Object> record = (Map<String, Object>) rec;
        if (!String.valueOf(FORMAT).equals(String.valueOf(record.get("format")))) {
            throw LrError.notReady("lightretriever_record_format", "index " + quote(first) + " has a plugin record of format "
                + record.get("format") + " and this plugin reads format " + FORMAT + "; run `lr plugin load --bundle BUNDLE --index "
                + first + "` with the lr that matches this plugin");
        }
        if (!String.valueOf(meta.get("bundle_id")).equals(String.valueOf(record.get("bundle_id")))) {
            throw LrError.notReady("lightretriever_bundle_mismatch", "index " + quote(first) + " was built with bundle "
                + meta.get("bundle_id") + " but its plugin record names bundle " + record.get("bundle_id")
                + "; run `lr plugin load --bundle <the bundle of " + meta.get("bundle_id") + "> --index " + first + "`");
        }
        for (String name : metas.keySet()) {
            Object other = metas.get(name).get(PLUGIN_KEY);
            if (!(other instanceof Map)) {
                throw LrError.notReady("lightretriever_not_loaded", "index " + quote(name) + " behind " + quote(target)
                    + " has no plugin record; run `lr plugin load --bundle BUNDLE --index " + target + "`");
            }
        }
        Settings settings = response.settings().get(first);
        int shards = settings == null ? 1 : settings.getAsInt("index.number_of_shards", 1);
        return new IndexRecord(target, record, shards);
    }

    static String quote(String s) {
        return "'" + s + "'";
    }
}
