package org.lightretriever.encode;

import java.util.Arrays;

/**
 * Character classes of HF tokenizers' BertNormalizer and BertPreTokenizer, per code point.
 *
 * <p>Whitespace, "control" (deleted by clean_text), punctuation and non-spacing marks come
 * from {@link BertTables}, probed from the Rust tokenizers library (its crates' Unicode
 * tables are neither the JDK's nor Python's: it keeps unassigned code points, for one), so
 * the result does not depend on the JDK's Unicode version. The CJK ranges are the
 * normaliser's own constants.
 */
final class BertChars {
    private BertChars() {
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
}
