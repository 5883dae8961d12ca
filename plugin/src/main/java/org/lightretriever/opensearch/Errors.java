package org.lightretriever.opensearch;

import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;

import org.opensearch.ExceptionsHelper;
import org.opensearch.OpenSearchException;
import org.opensearch.core.xcontent.XContentParseException;

/**
 * Every failure as the JSON error the engine answers ({@code {"error": {"root_cause",
 * "type", "reason"}, "status"}}), never with a stack trace: the plugin's own refusals with
 * their status, the engine's with theirs, anything else a 500 that says so.
 */
final class Errors {
    private Errors() {
    }

    static RuntimeException asRuntime(Exception e) {
        return e instanceof RuntimeException ? (RuntimeException) e : new RuntimeException(e.getMessage(), e);
    }

    static LrError of(Exception failure) {
        for (Throwable t = failure; t != null; t = t.getCause() == t ? null : t.getCause()) {
            if (t instanceof LrError) {
                return (LrError) t;
            }
        }
        Throwable cause = ExceptionsHelper.unwrapCause(failure);
        if (cause instanceof XContentParseException) {
            return LrError.badRequest("the request cannot be parsed: " + cause.getMessage());
        }
        if (cause instanceof OpenSearchException) {
            int status = ((OpenSearchException) cause).status().getStatus();
            return new LrError(status, OpenSearchException.getExceptionName(cause), ((OpenSearchException) cause).getDetailedMessage());
        }
        if (cause instanceof IllegalArgumentException) {
            return LrError.badRequest(String.valueOf(cause.getMessage()));
        }
        return new LrError(500, "lightretriever_internal_error", "the LightRetriever plugin failed on this request ("
            + cause.getClass().getSimpleName() + ": " + cause.getMessage() + "); the node keeps serving. Report it with the "
            + "request");
    }

    static Map<String, Object> body(LrError error) {
        Map<String, Object> cause = new LinkedHashMap<>();
        cause.put("type", error.type);
        cause.put("reason", error.getMessage());
        Map<String, Object> inner = new LinkedHashMap<>(cause);
        inner.put("root_cause", List.of(cause));
        Map<String, Object> out = new LinkedHashMap<>();
        out.put("error", inner);
        out.put("status", error.status);
        return out;
    }
}
