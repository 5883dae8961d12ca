package org.lightretriever.opensearch;

import org.opensearch.action.admin.indices.get.GetIndexRequest;
import org.opensearch.action.admin.indices.get.GetIndexResponse;
import org.opensearch.action.get.GetRequest;
import org.opensearch.action.get.GetResponse;
import org.opensearch.action.get.MultiGetRequest;
import org.opensearch.action.get.MultiGetResponse;
import org.opensearch.action.search.MultiSearchRequest;
import org.opensearch.action.search.MultiSearchResponse;
import org.opensearch.core.action.ActionListener;
import org.opensearch.rest.BaseRestHandler;
import org.opensearch.rest.RestRequest;
import org.opensearch.threadpool.ThreadPool;
import org.opensearch.transport.client.node.NodeClient;

/**
 * The engine-version layer: the one class that names the node client, whose package moved
 * from {@code org.opensearch.client} (2.x) to {@code org.opensearch.transport.client} in 3.0.
 * The source names the 3.x package; {@code lr_opensearch.plugin.build} rewrites that one
 * import when it builds for 2.x (CLIENT_PACKAGES), so one source tree builds for both.
 */
final class Cluster {
    private final NodeClient client;

    Cluster(NodeClient client) {
        this.client = client;
    }

    void multiSearch(MultiSearchRequest request, ActionListener<MultiSearchResponse> listener) {
        client.multiSearch(request, listener);
    }

    void multiGet(MultiGetRequest request, ActionListener<MultiGetResponse> listener) {
        client.multiGet(request, listener);
    }

    void get(GetRequest request, ActionListener<GetResponse> listener) {
        client.get(request, listener);
    }

    void getIndex(GetIndexRequest request, ActionListener<GetIndexResponse> listener) {
        client.admin().indices().getIndex(request, listener);
    }

    ThreadPool threadPool() {
        return client.threadPool();
    }

    /** A REST handler whose request handling sees a {@link Cluster} instead of the client. */
    abstract static class Handler extends BaseRestHandler {
        @Override
        protected final RestChannelConsumer prepareRequest(RestRequest request, NodeClient client) {
            return prepare(request, new Cluster(client));
        }

        protected abstract RestChannelConsumer prepare(RestRequest request, Cluster cluster);
    }
}
