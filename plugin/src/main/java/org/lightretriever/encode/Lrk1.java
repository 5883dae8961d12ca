package org.lightretriever.encode;

/**
 * The {@code lrk1} sparse key encoding ({@code lr_opensearch/bundle/keys.py}): ASCII letters
 * and digits as they are, every other code point as {@code -hh}, {@code -uhhhh} or
 * {@code -Uhhhhhh} (lower-case hex); the empty token is {@code -}.
 */
final class Lrk1 {
    private static final char[] HEX = "0123456789abcdef".toCharArray();

    private Lrk1() {
    }

    static boolean isSafe(int cp) {
        return (cp >= 'a' && cp <= 'z') || (cp >= 'A' && cp <= 'Z') || (cp >= '0' && cp <= '9');
    }

    /** The key of a vocabulary token (code points, so a surrogate pair is one escape). */
    static String encode(String token) {
        if (token.isEmpty()) {
            return "-";
        }
        StringBuilder out = new StringBuilder(token.length() + 8);
        for (int i = 0; i < token.length(); ) {
            int cp = token.codePointAt(i);
            i += Character.charCount(cp);
            if (isSafe(cp)) {
                out.append((char) cp);
            } else if (cp < 0x100) {
                out.append('-');
                hex(out, cp, 2);
            } else if (cp < 0x10000) {
                out.append("-u");
                hex(out, cp, 4);
            } else {
                out.append("-U");
                hex(out, cp, 6);
            }
        }
        return out.toString();
    }

    private static void hex(StringBuilder out, int value, int width) {
        for (int shift = 4 * (width - 1); shift >= 0; shift -= 4) {
            out.append(HEX[(value >> shift) & 0xf]);
        }
    }

    /** The token of a canonical key, or null when {@code key} is not one. */
    static String decode(String key) {
        if (key.equals("-")) {
            return "";
        }
        StringBuilder out = new StringBuilder(key.length());
        int i = 0;
        while (i < key.length()) {
            char c = key.charAt(i);
            if (c != '-') {
                if (!isSafe(c)) {
                    return null;
                }
                out.append(c);
                i++;
                continue;
            }
            int width = 2;
            int start = i + 1;
            if (start < key.length() && key.charAt(start) == 'u') {
                width = 4;
                start++;
            } else if (start < key.length() && key.charAt(start) == 'U') {
                width = 6;
                start++;
            }
            if (start + width > key.length()) {
                return null;
            }
            int cp = parseHex(key, start, start + width);
            if (cp < 0 || cp > Character.MAX_CODE_POINT) {
                return null;
            }
            out.appendCodePoint(cp);
            i = start + width;
        }
        String token = out.toString();
        return encode(token).equals(key) ? token : null;
    }

    private static int parseHex(String s, int from, int to) {
        int value = 0;
        for (int i = from; i < to; i++) {
            char c = s.charAt(i);
            int d = c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : -1;
            if (d < 0) {
                return -1;
            }
            value = value * 16 + d;
        }
        return value;
    }
}
