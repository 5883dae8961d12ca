package org.lightretriever.encode;

import java.io.BufferedReader;
import java.io.BufferedWriter;
import java.io.IOException;
import java.io.InputStreamReader;
import java.io.OutputStreamWriter;
import java.nio.charset.StandardCharsets;
import java.nio.file.DirectoryStream;
import java.nio.file.Files;
import java.nio.file.Path;
import java.nio.file.Paths;
import java.util.HashMap;
import java.util.Map;

/**
 * Command line check of the encoder: {@code java org.lightretriever.encode.EncodeMain PARTS_DIR}
 * reads the parts (one file each) from PARTS_DIR and one JSON string per stdin line, and
 * writes one JSON object per line: {@code {"ids": [...], "dense_bits": [float32 bits as
 * int...], "sparse": {key: weight}}} or {@code {"error": "..."}} for a refused text. The
 * first line written is {@code {"bundle_id": ..., "dim": ..., "memory_bytes": ...}}.
 * With {@code --normalize} after PARTS_DIR it writes instead, per text, the normalised text
 * and its pre-tokenized words: {@code {"normalized": "...", "words": [...]}}.
 */
public final class EncodeMain {
    private EncodeMain() {
    }

    public static void main(String[] args) throws IOException {
        boolean normalize = args.length == 2 && args[1].equals("--normalize");
        if (args.length != 1 && !normalize) {
            System.err.println("usage: EncodeMain PARTS_DIR [--normalize] < texts.jsonl");
            System.exit(2);
        }
        QueryModel model;
        try {
            model = QueryModel.load(readParts(Paths.get(args[0])));
        } catch (ModelFormatException e) {
            System.err.println("ModelFormatException: " + e.getMessage());
            System.exit(3);
            return;
        }
        BufferedReader in = new BufferedReader(new InputStreamReader(System.in, StandardCharsets.UTF_8));
        BufferedWriter out = new BufferedWriter(new OutputStreamWriter(System.out, StandardCharsets.UTF_8));
        out.write("{\"bundle_id\": " + Json.quote(model.bundleId()) + ", \"dim\": " + model.dim()
            + ", \"max_tokens\": " + model.maxTokens() + ", \"memory_bytes\": " + model.memoryBytes() + "}\n");
        String line;
        while ((line = in.readLine()) != null) {
            if (line.isEmpty()) {
                continue;
            }
            if (normalize) {
                out.write(normalized(model.tokenizer(), Json.parseString(line)));
                out.write('\n');
                continue;
            }
            try {
                out.write(result(model.encode(Json.parseString(line))));
            } catch (QueryTextException e) {
                out.write("{\"error\": " + Json.quote(e.getMessage()) + "}");
            }
            out.write('\n');
        }
        out.flush();
    }

    static Map<String, byte[]> readParts(Path dir) throws IOException {
        Map<String, byte[]> parts = new HashMap<>();
        try (DirectoryStream<Path> files = Files.newDirectoryStream(dir)) {
            for (Path file : files) {
                if (Files.isRegularFile(file)) {
                    parts.put(file.getFileName().toString(), Files.readAllBytes(file));
                }
            }
        }
        return parts;
    }

    private static String normalized(BertWordPiece tokenizer, String text) {
        String normal = tokenizer.normalize(text);
        StringBuilder sb = new StringBuilder("{\"normalized\": ").append(Json.quote(normal)).append(", \"words\": [");
        boolean first = true;
        for (String word : BertWordPiece.preTokenize(normal)) {
            sb.append(first ? "" : ", ").append(Json.quote(word));
            first = false;
        }
        return sb.append("]}").toString();
    }

    private static String result(EncodedQuery q) {
        StringBuilder sb = new StringBuilder(64 + 12 * q.dense.length);
        sb.append("{\"ids\": [");
        for (int i = 0; i < q.tokenIds.length; i++) {
            sb.append(i > 0 ? ", " : "").append(q.tokenIds[i]);
        }
        sb.append("], \"dense_bits\": [");
        for (int i = 0; i < q.dense.length; i++) {
            sb.append(i > 0 ? ", " : "").append(Float.floatToRawIntBits(q.dense[i]));
        }
        sb.append("], \"sparse\": {");
        boolean first = true;
        for (Map.Entry<String, Double> e : q.sparse.entrySet()) {
            sb.append(first ? "" : ", ").append(Json.quote(e.getKey())).append(": ").append(e.getValue());
            first = false;
        }
        return sb.append("}}").toString();
    }
}
