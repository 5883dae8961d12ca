package org.lightretriever.opensearch;

import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;

/**
 * Where one search's time went, answered under {@code lightretriever.timings} (milliseconds):
 * finding the index's record and model, encoding the text, the legs' multi-search (wall time,
 * and each leg's own {@code took} as its shards reported it: the slowest shard), fusing, and
 * fetching the page's sources. A few {@code System.nanoTime()} reads per search.
 */
final class Timings {
    private final long started;
    private long resolved;
    private long encoded;
    private long searched;
    private long fused;
    private final Map<String, Long> legTook = new LinkedHashMap<>();

    Timings(long started) {
        this.started = started;
    }

    void resolved() {
        resolved = System.nanoTime();
    }

    void encoded() {
        encoded = System.nanoTime();
    }

    void searched(List<String> legs, long[] tookMillis) {
        searched = System.nanoTime();
        for (int j = 0; j < legs.size(); j++) {
            legTook.put(legs.get(j), tookMillis[j]);
        }
    }

    void fused() {
        fused = System.nanoTime();
    }

    private static double ms(long from, long to) {
        return Math.round((to - from) / 1_000.0) / 1_000.0;
    }

    /** Whole milliseconds since the request arrived: the answer's {@code took}, as {@code _search} gives it. */
    long tookMillis() {
        return (System.nanoTime() - started) / 1_000_000;
    }

    /** The phases up to now (the fetch ends now). */
    Map<String, Object> asMap() {
        long now = System.nanoTime();
        Map<String, Object> out = new LinkedHashMap<>();
        out.put("resolve_ms", ms(started, resolved));
        out.put("encode_ms", ms(resolved, encoded));
        out.put("legs_ms", ms(encoded, searched));
        out.put("leg_took_ms", legTook);
        out.put("fuse_ms", ms(searched, fused));
        out.put("fetch_ms", ms(fused, now));
        return out;
    }
}
