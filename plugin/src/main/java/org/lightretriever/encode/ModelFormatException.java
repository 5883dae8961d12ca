package org.lightretriever.encode;

/** A query model's parts are missing, damaged or of a foreign format; the message names the part. */
public class ModelFormatException extends IllegalArgumentException {
    private static final long serialVersionUID = 1L;

    public ModelFormatException(String message) {
        super(message);
    }
}
