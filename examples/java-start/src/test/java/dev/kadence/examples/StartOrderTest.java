package dev.kadence.examples;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertNull;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.nio.charset.StandardCharsets;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.HexFormat;
import java.util.List;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;
import org.apache.avro.Schema;
import org.apache.avro.SchemaNormalization;
import org.apache.avro.generic.GenericDatumReader;
import org.apache.avro.generic.GenericRecord;
import org.apache.avro.io.DecoderFactory;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.clients.producer.internals.BuiltInPartitioner;
import org.apache.kafka.common.serialization.StringSerializer;
import org.apache.kafka.common.utils.Utils;
import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.Test;

/**
 * Checks this producer against the committed vectors in schemas/test-vectors/, which
 * tests/test_java_start.py checks Kadence's Python side against: so the two stay byte-compatible.
 * The vectors are read, never rewritten here (schemas/test-vectors/generate.py says when to).
 */
class StartOrderTest {
    private static final HexFormat HEX = HexFormat.of();
    private static Path schemas;
    private static Schema command;

    @BeforeAll
    static void load() throws Exception {
        schemas = StartOrder.schemasDir();
        command = StartOrder.loadCommandSchema(schemas);
    }

    private static JsonNode vectors(String name) throws Exception {
        return new ObjectMapper().readTree(schemas.resolve("test-vectors").resolve(name).toFile());
    }

    @Test
    void theDefaultPartitionerPutsEveryKeyOnTheVectorsPartition() throws Exception {
        JsonNode vectors = vectors("partitions.json");
        List<String> counts = new ArrayList<>();
        vectors.get("partition_counts").forEach(count -> counts.add(count.asText()));
        StringSerializer keySerializer = new StringSerializer(); // the producer's: UTF-8
        int checked = 0;
        for (JsonNode vector : vectors.get("keys")) {
            String key = vector.get("key").asText();
            String quoted = "key \"" + key + "\"";
            byte[] bytes = keySerializer.serialize(StartOrder.TOPIC, key);
            assertArrayEquals(HEX.parseHex(vector.get("utf8_hex").asText()), bytes, "UTF-8 of " + quoted);
            assertEquals(vector.get("murmur2").asInt(), Utils.murmur2(bytes), "murmur2 of " + quoted);
            assertEquals(counts.size(), vector.get("partitions").size(), "a partition for each count: " + quoted);
            for (String count : counts) {
                int partitions = Integer.parseInt(count);
                int expected = vector.get("partitions").get(count).asInt();
                // What KafkaProducer calls for a keyed record when no partitioner is configured
                // (an internals class, public but not API), and the formula it stands for.
                assertEquals(expected, BuiltInPartitioner.partitionForKey(bytes, partitions), quoted + ", " + count + " partitions");
                assertEquals(expected, Utils.toPositive(Utils.murmur2(bytes)) % partitions, quoted + ", " + count + " partitions");
                checked++;
            }
        }
        assertTrue(checked >= 100, "only " + checked + " vectors");
    }

    @Test
    void theSampleStartIsTheVectorsRecordByteForByte() throws Exception {
        JsonNode sample = vectors("start-command.json");
        String orderId = sample.get("order").get("order_id").asText();
        ProducerRecord<String, byte[]> record =
                StartOrder.startRecord(command, orderId, sample.get("order").get("amount").asDouble());

        assertEquals(sample.get("topic").asText(), record.topic());
        assertEquals(sample.get("key").asText(), record.key());
        assertArrayEquals(HEX.parseHex(sample.get("key_utf8_hex").asText()), record.key().getBytes(StandardCharsets.UTF_8));
        assertNull(record.partition(), "the partitioner picks the partition, not the example");
        assertEquals(1, record.headers().toArray().length);
        assertEquals(sample.get("headers").get(StartOrder.SCHEMA_HEADER).asText(),
                new String(record.headers().lastHeader(StartOrder.SCHEMA_HEADER).value(), StandardCharsets.US_ASCII),
                "Command.avsc changed since the vectors were made: see schemas/test-vectors/generate.py");
        byte[] expected = HEX.parseHex(sample.get("value_hex").asText());
        assertArrayEquals(expected, record.value(), "Avro bytes of the start command");

        // The vector's logical record (Avro's JSON encoding) is the same command, and Avro's Java
        // encoder writes it as Kadence's codec did.
        GenericRecord logical = new GenericDatumReader<GenericRecord>(command)
                .read(null, DecoderFactory.get().jsonDecoder(command, sample.get("record").toString()));
        assertArrayEquals(expected, StartOrder.encode(command, logical));
        assertEquals(orderId, logical.get("workflow_id").toString());
    }

    @Test
    void theFingerprintIsKadencesCurrentOneForCommand() throws Exception {
        String kadence = vectors("start-command.json").get("headers").get(StartOrder.SCHEMA_HEADER).asText();
        assertEquals(kadence, StartOrder.fingerprint(command),
                "Command.avsc changed since the vectors were made: see schemas/test-vectors/generate.py");
        // The same as the spec's 8 fingerprint bytes (little-endian) in hex.
        assertEquals(kadence, HEX.formatHex(SchemaNormalization.parsingFingerprint("CRC-64-AVRO", command)));
    }

    @Test
    void theOrderIsJsonAsPythonsJsonDumpsWritesIt() {
        // Expected strings are json.dumps outputs.
        assertEquals("{\"order_id\": \"x\", \"amount\": 42.0}", StartOrder.orderJson("x", 42.0));
        assertEquals("\"a\\\"b\\\\c\\n\\t\\u0001\\u007f \\u00e9 \\ud83d\\ude9a /\"",
                StartOrder.jsonString("a\"b\\c\n\t\u0001\u007f é 🚚 /"));
    }
}
