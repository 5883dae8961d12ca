package org.lightretriever.opensearch;

import java.security.MessageDigest;
import java.security.NoSuchAlgorithmException;
import java.util.ArrayList;
import java.util.Base64;
import java.util.HashMap;
import java.util.Iterator;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;

import org.lightretriever.encode.ModelFormatException;
import org.lightretriever.encode.QueryModel;
import org.opensearch.action.get.GetRequest;
import org.opensearch.action.get.GetResponse;
import org.opensearch.action.get.MultiGetItemResponse;
import org.opensearch.action.get.MultiGetRequest;
import org.opensearch.action.get.MultiGetResponse;
import org.opensearch.common.settings.Setting;
import org.opensearch.core.action.ActionListener;
import org.opensearch.index.IndexNotFoundException;

/**
 * The query models this node holds, by bundle id: loaded from the models index on first use
 * (or by {@code POST /_plugins/lightretriever/models/<bundle>/_load}), each checked against the
 * digest the index's plugin record names, built whole before it is served (a search holds the
 * entry it started with; a new load replaces the entry in one step), bounded by
 * {@code lightretriever.model_cache.max_bytes} (least recently used entries leave first; a
 * model larger than the bound is refused).
 *
 * <p>The models index (written by {@code lr plugin load}, {@code lr_opensearch.plugin.store}):
 * {@code <bundle>/manifest} ({@code digest}, {@code parts: {name: {size, sha256, chunks}}}) and
 * {@code <bundle>/<part>/<n>} ({@code data}: base64 of chunk n of the part).
 */
final class ModelStore {
    static final String INDEX = ".lightretriever-models";
    static final Setting<Long> MAX_BYTES = Setting.longSetting("lightretriever.model_cache.max_bytes", 256L << 20, 0L,
        Setting.Property.NodeScope, Setting.Property.Dynamic);

    /** One loaded model. */
    static final class Entry {
        final QueryModel model;
        final String bundleId;
        final String digest;
        final long bytes;
        final long loadedAtMillis;

        Entry(QueryModel model, String bundleId, String digest, long bytes) {
            this.model = model;
            this.bundleId = bundleId;
            this.digest = digest;
            this.bytes = bytes;
            this.loadedAtMillis = System.currentTimeMillis();
        }
    }

    private final LinkedHashMap<String, Entry> entries = new LinkedHashMap<>(16, 0.75f, true);
    private final Map<String, List<ActionListener<Entry>>> pending = new HashMap<>();
    private volatile long maxBytes;

    ModelStore(long maxBytes) {
        this.maxBytes = maxBytes;
    }

    void setMaxBytes(long maxBytes) {
        this.maxBytes = maxBytes;
    }

    long maxBytes() {
        return maxBytes;
    }

    /** The model of ``bundleId`` with ``digest`` (null: whichever is held), loading it if needed. */
    void get(Cluster cluster, String bundleId, String digest, ActionListener<Entry> listener) {
        String key = bundleId + "@" + digest;
        synchronized (this) {
            Entry held = entries.get(bundleId);
            if (held != null && (digest == null || held.digest.equals(digest))) {
                listener.onResponse(held);
                return;
            }
            List<ActionListener<Entry>> waiting = pending.get(key);
            if (waiting != null) {
                waiting.add(listener);
                return;
            }
            waiting = new ArrayList<>();
            waiting.add(listener);
            pending.put(key, waiting);
        }
        load(cluster, bundleId, digest, ActionListener.wrap(entry -> done(key, entry, null), e -> done(key, null, e)));
    }

    /** Load ``bundleId`` from the models index again (``lr plugin load``), whatever is held. */
    void reload(Cluster cluster, String bundleId, ActionListener<Entry> listener) {
        load(cluster, bundleId, null, listener);
    }

    private void done(String key, Entry entry, Exception failure) {
        List<ActionListener<Entry>> waiting;
        synchronized (this) {
            waiting = pending.remove(key);
        }
        for (ActionListener<Entry> l : waiting) {
            if (failure == null) {
                l.onResponse(entry);
            } else {
                l.onFailure(failure);
            }
        }
    }

    private void load(Cluster cluster, String bundleId, String digest, ActionListener<Entry> listener) {
        GetRequest request = new GetRequest(INDEX, bundleId + "/manifest").realtime(true);
        cluster.get(request, ActionListener.wrap(response -> {
            if (!response.isExists()) {
                throw notLoaded(bundleId);
            }
            Manifest manifest = new Manifest(bundleId, response.getSourceAsMap(), digest);
            if (manifest.bytes > maxBytes) {
                throw tooLarge(bundleId, manifest.bytes, "its parts are");
            }
            // decoding, checking and building take a while for a large table: not on the
            // thread that delivers the response
            cluster.multiGet(manifest.chunkRequest(), ActionListener.wrap(chunks -> cluster.threadPool().generic().execute(() -> {
                try {
                    listener.onResponse(build(bundleId, manifest.digest, manifest.assemble(chunks)));
                } catch (Exception e) {
                    listener.onFailure(e);
                }
            }), listener::onFailure));
        }, e -> listener.onFailure(e instanceof IndexNotFoundException ? notLoaded(bundleId) : e)));
    }

    private Entry build(String bundleId, String digest, Map<String, byte[]> parts) {
        QueryModel model;
        try {
            model = QueryModel.load(parts);
        } catch (ModelFormatException e) {
            throw LrError.notReady("lightretriever_model_format", "the plugin cannot read bundle " + bundleId + ": "
                + e.getMessage() + "; load a bundle this plugin reads (`lr plugin load --bundle B`)");
        }
        long bytes = model.memoryBytes();
        if (bytes > maxBytes) {
            throw tooLarge(bundleId, bytes, "its table takes");
        }
        Entry entry = new Entry(model, bundleId, digest, bytes);
        put(entry);
        return entry;
    }

    private synchronized void put(Entry entry) {
        entries.remove(entry.bundleId);
        long used = entry.bytes;
        for (Entry e : entries.values()) {
            used += e.bytes;
        }
        Iterator<Entry> oldest = entries.values().iterator();
        while (used > maxBytes && oldest.hasNext()) {
            used -= oldest.next().bytes;
            oldest.remove();
        }
        entries.put(entry.bundleId, entry);
    }

    /** This node's models: bundle id, digest, bytes, when loaded. */
    synchronized List<Map<String, Object>> status() {
        List<Map<String, Object>> out = new ArrayList<>();
        for (Entry e : entries.values()) {
            Map<String, Object> row = new LinkedHashMap<>();
            row.put("bundle_id", e.bundleId);
            row.put("digest", e.digest);
            row.put("bytes", e.bytes);
            row.put("dim", e.model.dim());
            row.put("max_tokens", e.model.maxTokens());
            row.put("loaded_at_millis", e.loadedAtMillis);
            out.add(row);
        }
        return out;
    }

    static LrError notLoaded(String bundleId) {
        return LrError.notReady("lightretriever_not_loaded", "bundle " + bundleId + " is not loaded into the cluster (no "
            + "manifest in " + INDEX + "); run `lr plugin load --bundle <the bundle directory> --index <index>`");
    }

    private LrError tooLarge(String bundleId, long bytes, String what) {
        return new LrError(409, "lightretriever_model_too_large", "bundle " + bundleId + ": " + what + " " + bytes
            + " bytes, more than lightretriever.model_cache.max_bytes (" + maxBytes + ") allows on this node; raise it "
            + "(PUT _cluster/settings {\"persistent\": {\"lightretriever.model_cache.max_bytes\": " + bytes + "}}) or use a "
            + "smaller bundle");
    }

    /** The manifest document of one bundle. */
    private static final class Manifest {
        final String bundleId;
        final String digest;
        final Map<String, Map<String, Object>> parts;
        final long bytes;

        @SuppressWarnings("unchecked")
        Manifest(String bundleId, Map<String, Object> source, String expected) {
            this.bundleId = bundleId;
            this.digest = String.valueOf(source.get("digest"));
            if (expected != null && !expected.equals(digest)) {
                throw LrError.notReady("lightretriever_stale_load", "the index's plugin record names model digest "
                    + expected + " of bundle " + bundleId + " but " + INDEX + " holds digest " + digest
                    + " (a load in progress, or one for another index); run `lr plugin load --bundle B --index I` again");
            }
            this.parts = (Map<String, Map<String, Object>>) (Map<String, ?>) source.get("parts");
            long total = 0;
            for (Map<String, Object> p : parts.values()) {
                total += ((Number) p.get("size")).longValue();
            }
            this.bytes = total;
        }

        MultiGetRequest chunkRequest() {
            MultiGetRequest request = new MultiGetRequest().realtime(true);
            for (Map.Entry<String, Map<String, Object>> p : parts.entrySet()) {
                int chunks = ((Number) p.getValue().get("chunks")).intValue();
                for (int n = 0; n < chunks; n++) {
                    request.add(INDEX, bundleId + "/" + p.getKey() + "/" + n);
                }
            }
            return request;
        }

        Map<String, byte[]> assemble(MultiGetResponse response) throws NoSuchAlgorithmException {
            Map<String, byte[]> found = new HashMap<>();
            for (MultiGetItemResponse item : response.getResponses()) {
                if (!item.isFailed() && item.getResponse().isExists()) {
                    Object data = item.getResponse().getSourceAsMap().get("data");
                    found.put(item.getId(), Base64.getDecoder().decode(String.valueOf(data)));
                }
            }
            Map<String, byte[]> out = new LinkedHashMap<>();
            for (Map.Entry<String, Map<String, Object>> p : parts.entrySet()) {
                int size = ((Number) p.getValue().get("size")).intValue();
                int chunks = ((Number) p.getValue().get("chunks")).intValue();
                byte[] whole = new byte[size];
                int at = 0;
                for (int n = 0; n < chunks; n++) {
                    byte[] chunk = found.get(bundleId + "/" + p.getKey() + "/" + n);
                    if (chunk == null || at + chunk.length > size) {
                        throw damaged(p.getKey(), "chunk " + n + " of " + chunks + (chunk == null ? " is missing" : " is too long"));
                    }
                    System.arraycopy(chunk, 0, whole, at, chunk.length);
                    at += chunk.length;
                }
                String sha = hex(MessageDigest.getInstance("SHA-256").digest(whole));
                if (at != size || !sha.equals(p.getValue().get("sha256"))) {
                    throw damaged(p.getKey(), "its " + at + " bytes have sha256 " + sha + ", the manifest says "
                        + size + " bytes, " + p.getValue().get("sha256"));
                }
                out.put(p.getKey(), whole);
            }
            return out;
        }

        private LrError damaged(String part, String what) {
            return LrError.notReady("lightretriever_damaged_load", "part " + part + " of bundle " + bundleId + " in " + INDEX
                + ": " + what + " (a load in progress, or a damaged one); run `lr plugin load --bundle B` again");
        }

        private static String hex(byte[] bytes) {
            StringBuilder out = new StringBuilder(bytes.length * 2);
            for (byte b : bytes) {
                out.append(String.format("%02x", b & 0xff));
            }
            return out.toString();
        }
    }
}
