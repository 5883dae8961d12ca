package org.lightretriever.encode;

import java.util.ArrayList;
import java.util.Arrays;
import java.util.HashMap;
import java.util.List;
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
    private final Map<String, Integer> starts;  // pieces that begin a word
    private final Map<String, Integer> continuations;  // pieces after the prefix, prefix removed
    private final int longestStart;  // UTF-16 units of the longest key of each map
    private final int longestContinuation;
    private final String[] addedTokens;
    private final int[] addedIds;
    private final long memoryBytes;

    BertWordPiece(Options options, Map<String, Integer> vocab, String[] addedTokens, int[] addedIds) {
        this.options = options;
        this.starts = new HashMap<>(vocab.size() * 2);
        this.continuations = new HashMap<>(vocab.size());
        int longest = 0;
        int longestCont = 0;
        for (Map.Entry<String, Integer> e : vocab.entrySet()) {
            String token = e.getKey();
            starts.put(token, e.getValue());
            longest = Math.max(longest, token.length());
            if (token.startsWith(options.prefix)) {
                String rest = token.substring(options.prefix.length());
                continuations.put(rest, e.getValue());
                longestCont = Math.max(longestCont, rest.length());
            }
        }
        long bytes = 64L * (starts.size() + continuations.size());  // map nodes, boxed ids, slots
        for (String rest : continuations.keySet()) {
            bytes += 40 + 2L * rest.length();  // the keys of starts are the vocabulary's strings
        }
        this.memoryBytes = bytes;
        this.longestStart = longest;
        this.longestContinuation = longestCont;
        this.addedTokens = addedTokens.clone();
        this.addedIds = addedIds.clone();
    }

    /** Estimated heap bytes of the lookup maps (not counting the vocabulary's strings). */
    long memoryBytes() {
        return memoryBytes;
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
        for (String word : preTokenize(normalize(segment))) {
            wordPiece(word, out);
        }
    }

    /** BertPreTokenizer: split on whitespace, each punctuation character a word of its own. */
    static List<String> preTokenize(String normal) {
        List<String> words = new ArrayList<>();
        int wordStart = -1;
        for (int i = 0; i < normal.length(); ) {
            int cp = normal.codePointAt(i);
            int next = i + Character.charCount(cp);
            boolean space = BertChars.isWhitespace(cp);
            if (space || BertChars.isPunctuation(cp)) {
                if (wordStart >= 0) {
                    words.add(normal.substring(wordStart, i));
                    wordStart = -1;
                }
                if (!space) {
                    words.add(normal.substring(i, next));
                }
            } else if (wordStart < 0) {
                wordStart = i;
            }
            i = next;
        }
        if (wordStart >= 0) {
            words.add(normal.substring(wordStart));
        }
        return words;
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

    /** NFD (decomposition, then canonical ordering of marks), then drop Mn. */
    private static String stripAccents(String s) {
        if (ascii(s)) {
            return s;
        }
        Ids cps = new Ids();
        for (int i = 0; i < s.length(); ) {
            int cp = s.codePointAt(i);
            i += Character.charCount(cp);
            BertChars.decompose(cp, cps);
        }
        int[] a = cps.data;
        for (int i = 1; i < cps.size; i++) {  // stable insertion sort of each run of marks
            int ccc = BertChars.combiningClass(a[i]);
            for (int j = i; ccc != 0 && j > 0 && BertChars.combiningClass(a[j - 1]) > ccc; j--) {
                int t = a[j - 1];
                a[j - 1] = a[j];
                a[j] = t;
            }
        }
        StringBuilder sb = new StringBuilder(s.length());
        for (int i = 0; i < cps.size; i++) {
            if (!BertChars.isNonSpacingMark(a[i])) {
                sb.appendCodePoint(a[i]);
            }
        }
        return sb.toString();
    }

    /** Per code point lower case, no context (Rust {@code char::to_lowercase}). */
    private static String lowercase(String s) {
        if (ascii(s)) {
            return s.toLowerCase(Locale.ROOT);
        }
        StringBuilder sb = new StringBuilder(s.length());
        for (int i = 0; i < s.length(); ) {
            int cp = s.codePointAt(i);
            i += Character.charCount(cp);
            BertChars.lowercase(cp, sb);
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
            // the vocabulary has no longer piece: start there (same result as from the word's end)
            Map<String, Integer> pieces = start > 0 ? continuations : starts;
            int end = Math.min(word.length(), start + (start > 0 ? longestContinuation : longestStart));
            Integer found = null;
            while (start < end) {
                found = pieces.get(word.substring(start, end));
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
