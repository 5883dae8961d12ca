package org.lightretriever.encode;

/** A query text the model cannot encode: empty, no tokens left, or not valid Unicode. */
public class QueryTextException extends IllegalArgumentException {
    private static final long serialVersionUID = 1L;

    public QueryTextException(String message) {
        super(message);
    }
}
