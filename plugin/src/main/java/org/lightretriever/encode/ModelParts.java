package org.lightretriever.encode;

import java.nio.ByteBuffer;
import java.nio.ByteOrder;
import java.security.MessageDigest;
import java.security.NoSuchAlgorithmException;
import java.util.HashMap;
import java.util.Map;

/**
 * Reads and checks the plugin parts of a bundle's query side (format {@value #FORMAT}).
 *
 * <p>Parts: {@code manifest.txt} (key=value lines), {@code vocab.txt} (one token per id,
 * UTF-8, {@code \n}-separated), {@code table.f32le} ([V, dim] little-endian float32),
 * optional {@code idf.f64le} ([V] little-endian float64; absent: count weights) and
 * {@code sparse_keep.u8} ([V] bytes, 1 = the token may enter the sparse query). The
 * manifest lists every other part with its byte size and sha256.
 */
final class ModelParts {
    static final String FORMAT = "lightretriever-plugin-query";
    static final int FORMAT_VERSION = 1;
    static final String VOCAB = "vocab.txt";
    static final String TABLE = "table.f32le";
    static final String IDF = "idf.f64le";
    static final String SPARSE_KEEP = "sparse_keep.u8";
    static final String TOKENIZER = "bert-wordpiece";
    private static final int MAX_VOCAB = 50_000_000;

    String bundleId;
    int dim;
    int maxTokens;
    int maxChars;
    BertWordPiece tokenizer;
    boolean[] special;
    float[] table;
    double[] idf;
    boolean[] sparseKeep;
    String[] keys;
    long memoryBytes;

    private ModelParts() {
    }

    static ModelParts read(Map<String, byte[]> parts) {
        if (parts == null) {
            throw new ModelFormatException("no parts given; pass the parts of a bundle's plugin export");
        }
        Manifest m = Manifest.parse(part(parts, Manifest.PART));
        checkFormat(m);
        Map<String, byte[]> checked = new HashMap<>();
        for (String name : m.string("parts").split(",", -1)) {
            checkPart(m, name, part(parts, name));
            checked.put(name, parts.get(name));
        }
        return read(m, checked);
    }

    /** The model from a checked manifest and its checked parts (none read unchecked). */
    private static ModelParts read(Manifest m, Map<String, byte[]> parts) {
        ModelParts p = new ModelParts();
        p.bundleId = m.string("bundle_id");
        int vocabSize = m.integer("vocab_size", 1, MAX_VOCAB);
        p.dim = m.integer("dim", 1, 1 << 16);
        p.maxTokens = m.integer("max_tokens", 1, 1 << 20);
        p.maxChars = p.maxTokens * m.integer("chars_per_token_cap", 1, 1000);
        String[] vocab = vocab(part(parts, VOCAB), vocabSize);
        p.keys = new String[vocabSize];
        long textBytes = 0;
        for (int i = 0; i < vocabSize; i++) {
            p.keys[i] = Lrk1.encode(vocab[i]);
            textBytes += 2L * (vocab[i].length() + p.keys[i].length()) + 2 * 40 + 8;
        }
        p.special = new boolean[vocabSize];
        for (int id : m.integers("special_ids", vocabSize - 1)) {
            p.special[id] = true;
        }
        p.tokenizer = tokenizer(m, vocab);
        p.table = floats(part(parts, TABLE), (long) vocabSize * p.dim);
        p.idf = m.string("sparse_weights").equals("idf") ? doubles(part(parts, IDF), vocabSize) : null;
        p.sparseKeep = m.flag("sparse_keep") ? bools(part(parts, SPARSE_KEEP), vocabSize) : null;
        p.memoryBytes = 4L * p.table.length + (p.idf == null ? 0 : 8L * vocabSize)
            + 2L * vocabSize + textBytes + p.tokenizer.memoryBytes();
        return p;
    }

    private static byte[] part(Map<String, byte[]> parts, String name) {
        byte[] bytes = parts.get(name);
        if (bytes == null) {
            throw new ModelFormatException("part " + name + " is missing or not listed in " + Manifest.PART + " (have " + new java.util.TreeSet<>(parts.keySet())
                + "); load all the parts of the bundle's plugin export");
        }
        return bytes;
    }

    private static void checkFormat(Manifest m) {
        if (!FORMAT.equals(m.string("format"))) {
            throw new ModelFormatException(Manifest.PART + ": format " + Manifest.show(m.string("format"))
                + " is not " + FORMAT + "; these are not a LightRetriever plugin export");
        }
        int version = m.integer("format_version", 0, Integer.MAX_VALUE);
        if (version != FORMAT_VERSION) {
            throw new ModelFormatException(Manifest.PART + ": format_version " + version
                + " is not supported (this plugin reads " + FORMAT_VERSION
                + "); export the bundle with the lr version matching the plugin");
        }
        if (!TOKENIZER.equals(m.string("tokenizer"))) {
            throw new ModelFormatException(Manifest.PART + ": tokenizer " + Manifest.show(m.string("tokenizer"))
                + " is not supported; the plugin encodes " + TOKENIZER + " bundles only");
        }
    }

    private static void checkPart(Manifest m, String name, byte[] bytes) {
        long size = m.number("size." + name, 0, Long.MAX_VALUE);
        if (bytes.length != size) {
            throw new ModelFormatException("part " + name + " has " + bytes.length + " bytes, the manifest says "
                + size + " (truncated or replaced?); load the parts again");
        }
        String expected = m.string("sha256." + name);
        String actual = sha256(bytes);
        if (!actual.equals(expected)) {
            throw new ModelFormatException("part " + name + " fails its checksum (sha256 " + actual
                + ", the manifest says " + expected + "); load the parts again");
        }
    }

    static String sha256(byte[] bytes) {
        try {
            byte[] digest = MessageDigest.getInstance("SHA-256").digest(bytes);
            StringBuilder sb = new StringBuilder(64);
            for (byte b : digest) {
                sb.append(Character.forDigit((b >> 4) & 0xf, 16)).append(Character.forDigit(b & 0xf, 16));
            }
            return sb.toString();
        } catch (NoSuchAlgorithmException e) {
            throw new IllegalStateException("the JDK has no SHA-256", e);
        }
    }

    private static String[] vocab(byte[] bytes, int vocabSize) {
        String[] lines = Manifest.utf8(VOCAB, bytes).split("\n", -1);
        if (lines.length != vocabSize) {
            throw new ModelFormatException("part " + VOCAB + " has " + lines.length
                + " lines, the manifest's vocab_size is " + vocabSize);
        }
        return lines;
    }

    private static BertWordPiece tokenizer(Manifest m, String[] vocab) {
        BertWordPiece.Options o = new BertWordPiece.Options();
        o.cleanText = m.flag("clean_text");
        o.handleChineseChars = m.flag("handle_chinese_chars");
        o.stripAccents = m.flag("strip_accents");
        o.lowercase = m.flag("lowercase");
        o.prefix = m.token("continuing_subword_prefix");
        o.unkId = m.integer("unk_id", 0, vocab.length - 1);
        o.maxInputCharsPerWord = m.integer("max_input_chars_per_word", 1, Integer.MAX_VALUE);
        int n = m.integer("wordpiece_size", 1, vocab.length);
        Map<String, Integer> words = new HashMap<>(n * 2);
        for (int i = 0; i < n; i++) {
            if (words.put(vocab[i], i) != null) {
                throw new ModelFormatException("part " + VOCAB + " repeats the token " + Manifest.show(vocab[i]));
            }
        }
        int[] addedIds = m.integers("added_ids", vocab.length - 1);
        String[] added = new String[addedIds.length];
        for (int k = 0; k < added.length; k++) {
            added[k] = vocab[addedIds[k]];
            if (added[k].isEmpty()) {
                throw new ModelFormatException(Manifest.PART + ": added token id " + addedIds[k] + " is empty");
            }
        }
        return new BertWordPiece(o, words, added, addedIds);
    }

    private static ByteBuffer le(byte[] bytes) {
        return ByteBuffer.wrap(bytes).order(ByteOrder.LITTLE_ENDIAN);
    }

    private static float[] floats(byte[] bytes, long count) {
        if (bytes.length != count * 4 || count > Integer.MAX_VALUE) {
            throw new ModelFormatException("part " + TABLE + " has " + bytes.length + " bytes, expected "
                + "vocab_size x dim x 4 = " + count * 4);
        }
        float[] out = new float[(int) count];
        le(bytes).asFloatBuffer().get(out);
        return out;
    }

    private static double[] doubles(byte[] bytes, int count) {
        if (bytes.length != 8L * count) {
            throw new ModelFormatException("part " + IDF + " has " + bytes.length + " bytes, expected "
                + "vocab_size x 8 = " + 8L * count);
        }
        double[] out = new double[count];
        le(bytes).asDoubleBuffer().get(out);
        return out;
    }

    private static boolean[] bools(byte[] bytes, int count) {
        if (bytes.length != count) {
            throw new ModelFormatException("part " + SPARSE_KEEP + " has " + bytes.length + " bytes, expected "
                + "vocab_size = " + count);
        }
        boolean[] out = new boolean[count];
        for (int i = 0; i < count; i++) {
            out[i] = bytes[i] != 0;
        }
        return out;
    }
}
