package org.lightretriever.encode;

import java.nio.charset.CharacterCodingException;
import java.nio.charset.CodingErrorAction;
import java.nio.charset.StandardCharsets;
import java.nio.ByteBuffer;
import java.util.LinkedHashMap;
import java.util.Map;

/**
 * The {@code manifest.txt} part: UTF-8 {@code key=value} lines (split at the first {@code =};
 * blank lines and lines starting with {@code #} ignored). Values that could hold any text
 * (tokens) are written in {@code lrk1}. Each getter names the key it could not read.
 */
final class Manifest {
    static final String PART = "manifest.txt";

    private final Map<String, String> values;

    private Manifest(Map<String, String> values) {
        this.values = values;
    }

    static Manifest parse(byte[] bytes) {
        String text = utf8(PART, bytes);
        Map<String, String> values = new LinkedHashMap<>();
        int lineNo = 0;
        for (String line : text.split("\n", -1)) {
            lineNo++;
            if (line.isEmpty() || line.startsWith("#")) {
                continue;
            }
            int eq = line.indexOf('=');
            if (eq <= 0) {
                throw new ModelFormatException(PART + " line " + lineNo + " is not key=value: " + show(line));
            }
            String key = line.substring(0, eq);
            if (values.put(key, line.substring(eq + 1)) != null) {
                throw new ModelFormatException(PART + " line " + lineNo + " repeats the key " + key);
            }
        }
        return new Manifest(values);
    }

    static String utf8(String part, byte[] bytes) {
        try {
            return StandardCharsets.UTF_8.newDecoder()
                .onMalformedInput(CodingErrorAction.REPORT)
                .onUnmappableCharacter(CodingErrorAction.REPORT)
                .decode(ByteBuffer.wrap(bytes))
                .toString();
        } catch (CharacterCodingException e) {
            throw new ModelFormatException("part " + part + " is not valid UTF-8 (" + e + ")");
        }
    }

    boolean has(String key) {
        return values.containsKey(key);
    }

    String string(String key) {
        String value = values.get(key);
        if (value == null) {
            throw new ModelFormatException(PART + " has no " + key + "; re-export the bundle's plugin parts");
        }
        return value;
    }

    /** A token written in lrk1. */
    String token(String key) {
        String token = Lrk1.decode(string(key));
        if (token == null) {
            throw new ModelFormatException(PART + ": " + key + "=" + show(string(key)) + " is not an lrk1 key");
        }
        return token;
    }

    long number(String key, long min, long max) {
        String value = string(key);
        long n;
        try {
            n = Long.parseLong(value);
        } catch (NumberFormatException e) {
            throw new ModelFormatException(PART + ": " + key + "=" + show(value) + " is not an integer");
        }
        if (n < min || n > max) {
            throw new ModelFormatException(PART + ": " + key + "=" + n + " is outside " + min + ".." + max);
        }
        return n;
    }

    int integer(String key, int min, int max) {
        return (int) number(key, min, max);
    }

    boolean flag(String key) {
        String value = string(key);
        if (value.equals("true")) {
            return true;
        }
        if (value.equals("false")) {
            return false;
        }
        throw new ModelFormatException(PART + ": " + key + "=" + show(value) + " is not true or false");
    }

    /** Comma-separated integers, each in {@code 0..max}; empty value: none. */
    int[] integers(String key, int max) {
        String value = string(key);
        if (value.isEmpty()) {
            return new int[0];
        }
        String[] items = value.split(",", -1);
        int[] out = new int[items.length];
        for (int i = 0; i < items.length; i++) {
            try {
                out[i] = Integer.parseInt(items[i]);
            } catch (NumberFormatException e) {
                throw new ModelFormatException(PART + ": " + key + " item " + show(items[i]) + " is not an integer");
            }
            if (out[i] < 0 || out[i] > max) {
                throw new ModelFormatException(PART + ": " + key + " item " + out[i] + " is outside 0.." + max);
            }
        }
        return out;
    }

    static String show(String s) {
        return "'" + (s.length() <= 60 ? s : s.substring(0, 60) + "...") + "'";
    }
}
