package org.lightretriever.encode;

import java.util.Arrays;

/**
 * Character classes of HF tokenizers' BertNormalizer and BertPreTokenizer, per code point.
 *
 * <p>Whitespace, "control" (deleted by clean_text), punctuation and non-spacing marks come
 * from {@link BertTables}, probed from the Rust tokenizers library (its crates' Unicode
 * tables are neither the JDK's nor Python's: it keeps unassigned code points, for one), so
 * the result does not depend on the JDK's Unicode version. So are the NFD decompositions
 * (Hangul syllables by the algorithm) and the lower-case mappings; the canonical combining
 * classes that order marks within NFD come from Python's unicodedata. The CJK ranges are
 * the normaliser's own constants.
 */
final class BertChars {
    private static final Mapping NFD = new Mapping(BertTables.NFD);
    private static final Mapping LOWERCASE = new Mapping(BertTables.LOWERCASE);
    private static final int[] CCC_STARTS;
    private static final int[] CCC_ENDS;
    private static final int[] CCC_VALUES;

    static {
        String[] items = BertTables.COMBINING_CLASS.split(";");
        CCC_STARTS = new int[items.length];
        CCC_ENDS = new int[items.length];
        CCC_VALUES = new int[items.length];
        for (int i = 0; i < items.length; i++) {
            int dash = items[i].indexOf('-');
            int colon = items[i].indexOf(':');
            CCC_STARTS[i] = Integer.parseInt(items[i].substring(0, dash), 16);
            CCC_ENDS[i] = Integer.parseInt(items[i].substring(dash + 1, colon), 16);
            CCC_VALUES[i] = Integer.parseInt(items[i].substring(colon + 1));
        }
    }

    private BertChars() {
    }

    /** Code point -> code points, from a generated {@code cp:cp cp;...} string (hex). */
    private static final class Mapping {
        final int[] keys;
        final int[][] values;

        Mapping(String table) {
            String[] items = table.split(";");
            keys = new int[items.length];
            values = new int[items.length][];
            for (int i = 0; i < items.length; i++) {
                int colon = items[i].indexOf(':');
                keys[i] = Integer.parseInt(items[i].substring(0, colon), 16);
                String[] cps = items[i].substring(colon + 1).split(" ");
                values[i] = new int[cps.length];
                for (int k = 0; k < cps.length; k++) {
                    values[i][k] = Integer.parseInt(cps[k], 16);
                }
            }
        }

        /** The mapping of {@code cp}, or null when it maps to itself. */
        int[] get(int cp) {
            int i = Arrays.binarySearch(keys, cp);
            return i >= 0 ? values[i] : null;
        }
    }

    private static boolean in(int cp, int[] starts, int[] ends) {
        int i = Arrays.binarySearch(starts, cp);
        if (i >= 0) {
            return true;
        }
        int before = -i - 2;
        return before >= 0 && cp <= ends[before];
    }

    /** Rust {@code char::is_whitespace} (Unicode White_Space). */
    static boolean isWhitespace(int cp) {
        if (cp < 0x80) {
            return cp == ' ' || (cp >= 0x09 && cp <= 0x0d);
        }
        return in(cp, BertTables.WHITESPACE_STARTS, BertTables.WHITESPACE_ENDS);
    }

    /** Deleted by clean_text: NUL, U+FFFD and the library's "other" characters but tab, LF, CR. */
    static boolean isCleaned(int cp) {
        return in(cp, BertTables.CLEANED_STARTS, BertTables.CLEANED_ENDS);
    }

    /** The CJK ideograph blocks BertNormalizer puts spaces around (its exact ranges). */
    static boolean isChinese(int cp) {
        return (cp >= 0x4e00 && cp <= 0x9fff) || (cp >= 0x3400 && cp <= 0x4dbf)
            || (cp >= 0x20000 && cp <= 0x2a6df) || (cp >= 0x2a700 && cp <= 0x2b73f)
            || (cp >= 0x2b740 && cp <= 0x2b81f) || (cp >= 0x2b920 && cp <= 0x2ceaf)
            || (cp >= 0xf900 && cp <= 0xfaff) || (cp >= 0x2f800 && cp <= 0x2fa1f);
    }

    /** Isolated by BertPreTokenizer: ASCII punctuation (symbols included) or Unicode P*. */
    static boolean isPunctuation(int cp) {
        return in(cp, BertTables.PUNCTUATION_STARTS, BertTables.PUNCTUATION_ENDS);
    }

    /** Dropped by strip_accents after NFD (Mn). */
    static boolean isNonSpacingMark(int cp) {
        return cp >= 0x300 && in(cp, BertTables.NONSPACING_MARK_STARTS, BertTables.NONSPACING_MARK_ENDS);
    }

    /** The tokenizer's canonical decomposition of one code point, appended to {@code out}. */
    static void decompose(int cp, BertWordPiece.Ids out) {
        int hangul = cp - 0xac00;
        if (hangul >= 0 && hangul < 11172) {
            out.add(0x1100 + hangul / 588);
            out.add(0x1161 + (hangul % 588) / 28);
            if (hangul % 28 != 0) {
                out.add(0x11a7 + hangul % 28);
            }
            return;
        }
        int[] mapped = cp < 0xc0 ? null : NFD.get(cp);
        if (mapped == null) {
            out.add(cp);
        } else {
            for (int c : mapped) {
                out.add(c);
            }
        }
    }

    /** Canonical combining class (0 for starters). */
    static int combiningClass(int cp) {
        if (cp < 0x300) {
            return 0;
        }
        int i = Arrays.binarySearch(CCC_STARTS, cp);
        int at = i >= 0 ? i : -i - 2;
        return at >= 0 && cp <= CCC_ENDS[at] ? CCC_VALUES[at] : 0;
    }

    /** The tokenizer's (Rust {@code char::to_lowercase}) lower case of one code point. */
    static void lowercase(int cp, StringBuilder out) {
        if (cp < 0x80) {
            out.append((char) (cp >= 'A' && cp <= 'Z' ? cp + 32 : cp));
            return;
        }
        int[] mapped = LOWERCASE.get(cp);
        if (mapped == null) {
            out.appendCodePoint(cp);
        } else {
            for (int c : mapped) {
                out.appendCodePoint(c);
            }
        }
    }
}
