package org.lightretriever.opensearch;

/**
 * A request the plugin refuses: an HTTP status, an error type and a reason that names the
 * cause and the fix. Answered as {@code {"error": {"type", "reason"}, "status"}}, never with a
 * stack trace.
 */
final class LrError extends RuntimeException {
    private static final long serialVersionUID = 1L;

    final int status;
    final String type;

    LrError(int status, String type, String reason) {
        super(reason, null, false, false);
        this.status = status;
        this.type = type;
    }

    /** 400: the request itself is wrong. */
    static LrError badRequest(String reason) {
        return new LrError(400, "lightretriever_bad_request", reason);
    }

    /** 404: the target does not exist. */
    static LrError notFound(String type, String reason) {
        return new LrError(404, type, reason);
    }

    /** 409: the cluster is not set up for the request (a missing or stale load). */
    static LrError notReady(String type, String reason) {
        return new LrError(409, type, reason);
    }
}
