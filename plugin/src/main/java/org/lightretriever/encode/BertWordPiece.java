package org.lightretriever.encode;

import java.text.Normalizer;
import java.util.Arrays;
import java.util.Locale;
import java.util.Map;

/**
 * HF tokenizers' BERT pipeline for one text, without special tokens added: added tokens
 * (matched on the raw text, leftmost-longest), then per remaining segment BertNormalizer
 * (clean_text, handle_chinese_chars, strip_accents, lowercase), BertPreTokenizer (split
 * on whitespace, each punctuation character its own word) and WordPiece (greedy
 * longest-match-first, continuation prefix, a word longer than max_input_chars_per_word or
 * with no match is one [UNK]). Immutable, so thread-safe.
 */
final class BertWordPiece {
    /** Tokenizer flags, as tokenizer.json holds them (strip_accents resolved). */
    static final class Options {
        boolean cleanText = true;
        boolean handleChineseChars = true;
        boolean stripAccents = true;
        boolean lowercase = true;
        String prefix = "##";
        int unkId;
        int maxInputCharsPerWord = 100;
    }

    private final Options options;
    private final Map<String, Integer> vocab;
    private final String[] addedTokens;
    private final int[] addedIds;

    BertWordPiece(Options options, Map<String, Integer> vocab, String[] addedTokens, int[] addedIds) {
        this.options = options;
        this.vocab = vocab;
        this.addedTokens = addedTokens.clone();
        this.addedIds = addedIds.clone();
    }

    /** Growable int array. */
    static final class Ids {
        int[] data = new int[16];
        int size;

        void add(int id) {
            if (size == data.length) {
                data = Arrays.copyOf(data, size * 2);
            }
            data[size++] = id;
        }
    }

    /** Token ids of {@code text} as {@code Tokenizer.encode(text, add_special_tokens=False)}. */
    void tokenize(String text, Ids out) {
        int segment = 0;
        int i = 0;
        while (i < text.length()) {
            int match = longestAddedAt(text, i);
            if (match < 0) {
                i++;
                continue;
            }
            if (i > segment) {
                tokenizeSegment(text.substring(segment, i), out);
            }
            out.add(addedIds[match]);
            i += addedTokens[match].length();
            segment = i;
        }
        if (segment < text.length()) {
            tokenizeSegment(text.substring(segment), out);
        }
    }

    private int longestAddedAt(String text, int at) {
        int best = -1;
        for (int k = 0; k < addedTokens.length; k++) {
            String token = addedTokens[k];
            if (text.startsWith(token, at) && (best < 0 || token.length() > addedTokens[best].length())) {
                best = k;
            }
        }
        return best;
    }

    private void tokenizeSegment(String segment, Ids out) {
        String normal = normalize(segment);
        int wordStart = -1;
        for (int i = 0; i < normal.length(); ) {
            int cp = normal.codePointAt(i);
            int next = i + Character.charCount(cp);
            boolean space = BertChars.isWhitespace(cp);
            if (space || BertChars.isPunctuation(cp)) {
                if (wordStart >= 0) {
                    wordPiece(normal.substring(wordStart, i), out);
                    wordStart = -1;
                }
                if (!space) {
                    wordPiece(normal.substring(i, next), out);
                }
            } else if (wordStart < 0) {
                wordStart = i;
            }
            i = next;
        }
        if (wordStart >= 0) {
            wordPiece(normal.substring(wordStart), out);
        }
    }

    /** BertNormalizer: clean_text, handle_chinese_chars, strip_accents, lowercase, in that order. */
    String normalize(String text) {
        StringBuilder sb = new StringBuilder(text.length() + 8);
        for (int i = 0; i < text.length(); ) {
            int cp = text.codePointAt(i);
            i += Character.charCount(cp);
            if (options.cleanText) {
                if (BertChars.isCleaned(cp)) {
                    continue;
                }
                if (BertChars.isWhitespace(cp)) {
                    cp = ' ';
                }
            }
            if (options.handleChineseChars && BertChars.isChinese(cp)) {
                sb.append(' ').appendCodePoint(cp).append(' ');
            } else {
                sb.appendCodePoint(cp);
            }
        }
        String s = sb.toString();
        if (options.stripAccents) {
            s = stripAccents(s);
        }
        return options.lowercase ? lowercase(s) : s;
    }

    private static boolean ascii(String s) {
        for (int i = 0; i < s.length(); i++) {
            if (s.charAt(i) >= 0x80) {
                return false;
            }
        }
        return true;
    }

    private static String stripAccents(String s) {
        if (ascii(s)) {
            return s;
        }
        String nfd = Normalizer.normalize(s, Normalizer.Form.NFD);
        StringBuilder sb = new StringBuilder(nfd.length());
        for (int i = 0; i < nfd.length(); ) {
            int cp = nfd.codePointAt(i);
            i += Character.charCount(cp);
            if (!BertChars.isNonSpacingMark(cp)) {
                sb.appendCodePoint(cp);
            }
        }
        return sb.toString();
    }

    /** Per code point full lower-case mapping, no context (Rust {@code char::to_lowercase}). */
    private static String lowercase(String s) {
        if (ascii(s)) {
            return s.toLowerCase(Locale.ROOT);
        }
        StringBuilder sb = new StringBuilder(s.length());
        for (int i = 0; i < s.length(); ) {
            int cp = s.codePointAt(i);
            int n = Character.charCount(cp);
            if (cp < 0x80) {
                sb.append((char) (cp >= 'A' && cp <= 'Z' ? cp + 32 : cp));
            } else {
                sb.append(s.substring(i, i + n).toLowerCase(Locale.ROOT));
            }
            i += n;
        }
        return sb.toString();
    }

    /** WordPiece of one pre-tokenized word. */
    private void wordPiece(String word, Ids out) {
        if (word.codePointCount(0, word.length()) > options.maxInputCharsPerWord) {
            out.add(options.unkId);
            return;
        }
        int mark = out.size;
        int start = 0;
        while (start < word.length()) {
            int end = word.length();
            Integer found = null;
            while (start < end) {
                String piece = word.substring(start, end);
                found = vocab.get(start > 0 ? options.prefix + piece : piece);
                if (found != null) {
                    break;
                }
                end -= Character.charCount(word.codePointBefore(end));
            }
            if (found == null) {
                out.size = mark;
                out.add(options.unkId);
                return;
            }
            out.add(found);
            start = end;
        }
    }
}
