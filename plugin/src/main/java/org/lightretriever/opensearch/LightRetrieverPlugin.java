package org.lightretriever.opensearch;

import java.util.ArrayList;
import java.util.List;
import java.util.function.Supplier;

import org.opensearch.cluster.metadata.IndexNameExpressionResolver;
import org.opensearch.cluster.node.DiscoveryNodes;
import org.opensearch.common.settings.ClusterSettings;
import org.opensearch.common.settings.IndexScopedSettings;
import org.opensearch.common.settings.Setting;
import org.opensearch.common.settings.Settings;
import org.opensearch.common.settings.SettingsFilter;
import org.opensearch.plugins.ActionPlugin;
import org.opensearch.plugins.Plugin;
import org.opensearch.rest.RestController;
import org.opensearch.rest.RestHandler;

/**
 * LightRetriever inside the node: {@code POST /<index>/_lightretriever} encodes the query text
 * with the index's bundle, runs its legs as separate searches and fuses them as {@code lr
 * search} does (docs/PLUGIN.md).
 */
public class LightRetrieverPlugin extends Plugin implements ActionPlugin {
    private final ModelStore store;

    public LightRetrieverPlugin(Settings settings) {
        this.store = new ModelStore(ModelStore.MAX_BYTES.get(settings));
    }

    @Override
    public List<Setting<?>> getSettings() {
        List<Setting<?>> out = new ArrayList<>();
        out.add(ModelStore.MAX_BYTES);
        return out;
    }

    @Override
    public List<RestHandler> getRestHandlers(Settings settings, RestController restController, ClusterSettings clusterSettings,
                                             IndexScopedSettings indexScopedSettings, SettingsFilter settingsFilter,
                                             IndexNameExpressionResolver resolver, Supplier<DiscoveryNodes> nodes) {
        clusterSettings.addSettingsUpdateConsumer(ModelStore.MAX_BYTES, store::setMaxBytes);
        return new ArrayList<>(RestHandlers.all(store));
    }
}
