package org.lightretriever.encode;

/** The two bits of JSON {@link EncodeMain} needs: read a string literal, quote a string. */
final class Json {
    private Json() {
    }

    /** The value of one JSON string literal (surrounding whitespace allowed). */
    static String parseString(String text) {
        String s = text.strip();
        if (s.length() < 2 || s.charAt(0) != '"' || s.charAt(s.length() - 1) != '"') {
            throw new IllegalArgumentException("not a JSON string: " + Manifest.show(s));
        }
        StringBuilder out = new StringBuilder(s.length());
        for (int i = 1; i < s.length() - 1; i++) {
            char c = s.charAt(i);
            if (c != '\\') {
                out.append(c);
                continue;
            }
            char e = s.charAt(++i);
            switch (e) {
                case 'b': out.append('\b'); break;
                case 'f': out.append('\f'); break;
                case 'n': out.append('\n'); break;
                case 'r': out.append('\r'); break;
                case 't': out.append('\t'); break;
                case 'u':
                    out.append((char) Integer.parseInt(s.substring(i + 1, i + 5), 16));
                    i += 4;
                    break;
                default: out.append(e);
            }
        }
        return out.toString();
    }

    /** A JSON string literal (non-ASCII and controls as {@code \\uXXXX}). */
    static String quote(String s) {
        StringBuilder out = new StringBuilder(s.length() + 2).append('"');
        for (int i = 0; i < s.length(); i++) {
            char c = s.charAt(i);
            if (c == '"' || c == '\\') {
                out.append('\\').append(c);
            } else if (c < 0x20 || c >= 0x7f) {
                out.append(String.format("\\u%04x", (int) c));
            } else {
                out.append(c);
            }
        }
        return out.append('"').toString();
    }
}
