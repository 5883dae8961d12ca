package org.lightretriever.opensearch;

import java.util.Arrays;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;

import org.opensearch.common.xcontent.XContentHelper;
import org.opensearch.core.action.ActionListener;
import org.opensearch.core.rest.RestStatus;
import org.opensearch.core.xcontent.XContentBuilder;
import org.opensearch.rest.BytesRestResponse;
import org.opensearch.rest.RestChannel;
import org.opensearch.rest.RestRequest;

/**
 * The plugin's REST endpoints.
 *
 * <ul>
 *   <li>{@code POST|GET /<index>/_lightretriever}: text in, fused hits out ({@link SearchAction});</li>
 *   <li>{@code POST /_plugins/lightretriever/models/<bundle>/_load}: (re)load a bundle's model from the
 *       models index on this node (what {@code lr plugin load} calls; refuses a model larger than
 *       {@code lightretriever.model_cache.max_bytes});</li>
 *   <li>{@code GET /_plugins/lightretriever/models}: the models this node holds.</li>
 * </ul>
 */
final class RestHandlers {
    static final String BASE = "/_plugins/lightretriever";

    private RestHandlers() {
    }

    static List<Cluster.Handler> all(ModelStore store) {
        return Arrays.asList(new Search(store), new Load(store), new Status(store));
    }

    static void send(RestChannel channel, int status, Map<String, Object> body) {
        try {
            XContentBuilder builder = channel.newBuilder();
            builder.map(body);
            channel.sendResponse(new BytesRestResponse(RestStatus.fromCode(status), builder));
        } catch (Exception e) {
            channel.sendResponse(new BytesRestResponse(RestStatus.INTERNAL_SERVER_ERROR, "application/json",
                "{\"error\":{\"type\":\"lightretriever_internal_error\",\"reason\":\"the answer could not be written\"},\"status\":500}"));
        }
    }

    static void fail(RestChannel channel, Exception e) {
        LrError error = Errors.of(e);
        send(channel, error.status, Errors.body(error));
    }

    static ActionListener<Map<String, Object>> answer(RestChannel channel) {
        return ActionListener.wrap(body -> send(channel, 200, body), e -> fail(channel, e));
    }

    /** {@code POST /<index>/_lightretriever}. */
    static final class Search extends Cluster.Handler {
        private final ModelStore store;

        Search(ModelStore store) {
            this.store = store;
        }

        @Override
        public String getName() {
            return "lightretriever_search";
        }

        @Override
        public List<Route> routes() {
            return Arrays.asList(new Route(RestRequest.Method.POST, "/{index}/_lightretriever"),
                new Route(RestRequest.Method.GET, "/{index}/_lightretriever"));
        }

        @Override
        protected RestChannelConsumer prepare(RestRequest request, Cluster cluster) {
            String index = request.param("index");
            SearchBody body;
            try {
                body = SearchBody.parse(json(request));
            } catch (Exception e) {
                return channel -> fail(channel, e);
            }
            return channel -> {
                try {
                    new SearchAction(cluster, store, request.getXContentRegistry(), index, body).run(answer(channel));
                } catch (Exception e) {
                    fail(channel, e);
                }
            };
        }

        private static Map<String, Object> json(RestRequest request) {
            if (!request.hasContent()) {
                throw LrError.badRequest("the request has no body; send a JSON object such as " + SearchBody.EXAMPLE);
            }
            try {
                return XContentHelper.convertToMap(request.content(), true, request.getMediaType()).v2();
            } catch (Exception e) {
                throw LrError.badRequest("the request body is not a JSON object; send one such as " + SearchBody.EXAMPLE);
            }
        }
    }

    /** {@code POST /_plugins/lightretriever/models/<bundle>/_load}. */
    static final class Load extends Cluster.Handler {
        private final ModelStore store;

        Load(ModelStore store) {
            this.store = store;
        }

        @Override
        public String getName() {
            return "lightretriever_model_load";
        }

        @Override
        public List<Route> routes() {
            return Arrays.asList(new Route(RestRequest.Method.POST, BASE + "/models/{bundle_id}/_load"));
        }

        @Override
        protected RestChannelConsumer prepare(RestRequest request, Cluster cluster) {
            String bundleId = request.param("bundle_id");
            return channel -> store.reload(cluster, bundleId, ActionListener.wrap(entry -> {
                Map<String, Object> out = new LinkedHashMap<>();
                out.put("bundle_id", entry.bundleId);
                out.put("digest", entry.digest);
                out.put("bytes", entry.bytes);
                out.put("max_bytes", store.maxBytes());
                send(channel, 200, out);
            }, e -> fail(channel, e)));
        }
    }

    /** {@code GET /_plugins/lightretriever/models}. */
    static final class Status extends Cluster.Handler {
        private final ModelStore store;

        Status(ModelStore store) {
            this.store = store;
        }

        @Override
        public String getName() {
            return "lightretriever_models";
        }

        @Override
        public List<Route> routes() {
            return Arrays.asList(new Route(RestRequest.Method.GET, BASE + "/models"));
        }

        @Override
        protected RestChannelConsumer prepare(RestRequest request, Cluster cluster) {
            return channel -> {
                Map<String, Object> out = new LinkedHashMap<>();
                out.put("max_bytes", store.maxBytes());
                out.put("models", store.status());
                send(channel, 200, out);
            };
        }
    }
}
