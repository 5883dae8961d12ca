package org.lightretriever.encode;

/**
 * Character classes of HF tokenizers' BertNormalizer and BertPreTokenizer (Rust), per code
 * point.
 *
 * <p>Rust's {@code char::is_whitespace} is Unicode's White_Space property (written out here:
 * Java's {@code isWhitespace} differs on no-break spaces and U+001C..U+001F). The category
 * tests (other = Cc Cf Cn Co Cs, punctuation = P*, non-spacing mark = Mn) use the JDK's
 * Unicode tables; the Rust side uses its crates' tables, so characters assigned in one
 * Unicode version and not the other can differ (see docs/PLUGIN.md).
 */
final class BertChars {
    private BertChars() {
    }

    /** Unicode White_Space (Rust {@code char::is_whitespace}). */
    static boolean isWhitespace(int cp) {
        if (cp < 0x80) {
            return cp == ' ' || (cp >= 0x09 && cp <= 0x0d);
        }
        return cp == 0x85 || cp == 0xa0 || cp == 0x1680 || (cp >= 0x2000 && cp <= 0x200a)
            || cp == 0x2028 || cp == 0x2029 || cp == 0x202f || cp == 0x205f || cp == 0x3000;
    }

    /** Deleted by clean_text: NUL, U+FFFD and "other" (Cc Cf Cn Co Cs) except tab, LF, CR. */
    static boolean isCleaned(int cp) {
        if (cp == '\t' || cp == '\n' || cp == '\r') {
            return false;
        }
        if (cp == 0 || cp == 0xfffd) {
            return true;
        }
        switch (Character.getType(cp)) {
            case Character.CONTROL:
            case Character.FORMAT:
            case Character.UNASSIGNED:
            case Character.PRIVATE_USE:
            case Character.SURROGATE:
                return true;
            default:
                return false;
        }
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
        if (cp < 0x80) {
            return (cp >= 33 && cp <= 47) || (cp >= 58 && cp <= 64) || (cp >= 91 && cp <= 96)
                || (cp >= 123 && cp <= 126);
        }
        switch (Character.getType(cp)) {
            case Character.CONNECTOR_PUNCTUATION:
            case Character.DASH_PUNCTUATION:
            case Character.START_PUNCTUATION:
            case Character.END_PUNCTUATION:
            case Character.INITIAL_QUOTE_PUNCTUATION:
            case Character.FINAL_QUOTE_PUNCTUATION:
            case Character.OTHER_PUNCTUATION:
                return true;
            default:
                return false;
        }
    }

    /** Dropped by strip_accents after NFD (Mn). */
    static boolean isNonSpacingMark(int cp) {
        return cp >= 0x300 && Character.getType(cp) == Character.NON_SPACING_MARK;
    }
}
