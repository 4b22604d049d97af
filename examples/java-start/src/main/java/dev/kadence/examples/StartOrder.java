package dev.kadence.examples;

import java.io.ByteArrayOutputStream;
import java.io.IOException;
import java.net.URISyntaxException;
import java.nio.ByteBuffer;
import java.nio.charset.StandardCharsets;
import java.nio.file.Path;
import java.util.List;
import java.util.Map;
import java.util.Properties;

import org.apache.avro.Schema;
import org.apache.avro.SchemaNormalization;
import org.apache.avro.SchemaParser;
import org.apache.avro.generic.GenericDatumWriter;
import org.apache.avro.generic.GenericRecord;
import org.apache.avro.generic.GenericRecordBuilder;
import org.apache.avro.io.BinaryEncoder;
import org.apache.avro.io.EncoderFactory;
import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.ProducerConfig;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.clients.producer.RecordMetadata;
import org.apache.kafka.common.serialization.ByteArraySerializer;
import org.apache.kafka.common.serialization.StringSerializer;

/**
 * Starts Kadence's order workflow (examples/order.py) as any Java service can: one record on
 * kadence.commands, written with nothing but kafka-clients and avro.
 *
 * <pre>java -jar target/java-start.jar ORDER_ID AMOUNT</pre>
 *
 * The record, as docs/workflows.md ("Starting a workflow from any Kafka producer") describes it:
 * key = the workflow id (here the order id) in UTF-8; value = Avro binary of
 * schemas/Command.avsc, no framing, whose command is StartWorkflowExecution; header
 * kadence-schema = the fingerprint of the schema it was written with.
 */
public final class StartOrder {
    static final String TOPIC = "kadence.commands";
    static final String SCHEMA_HEADER = "kadence-schema";
    static final String IDENTITY = "java-start-example";

    /**
     * The files Command.avsc needs besides itself: Kadence keeps each shared type in a file of
     * its own, named after it. Only these, not the whole directory: HistoryEvent.avsc defines
     * another record with a name Command.avsc also uses, and one parser holds one type per name.
     * A new reference in Command.avsc fails loudly here ("Undefined schema: X"): add X to the list.
     */
    static final List<String> COMMAND_DEPENDENCIES =
            List.of("Payload", "RetryPolicy", "RetryState", "TimeoutType", "Failure", "TimerKind", "QueryTask", "ScheduledBy",
                    "ScheduleOverlapPolicy", "Schedule", "TimeSkipping", "SchedulePatch", "NexusCaller");

    private StartOrder() {
    }

    public static void main(String[] args) throws Exception {
        if (args.length != 2) {
            System.err.println("usage: StartOrder ORDER_ID AMOUNT");
            System.exit(2);
        }
        String orderId = args[0];
        double amount = Double.parseDouble(args[1]);
        Schema command = loadCommandSchema(schemasDir());
        ProducerRecord<String, byte[]> record = startRecord(command, orderId, amount);
        try (KafkaProducer<String, byte[]> producer = new KafkaProducer<>(producerConfig())) {
            RecordMetadata sent = producer.send(record).get();
            System.out.printf("produced StartWorkflowExecution(OrderWorkflow) for workflow %s to %s partition %d offset %d%n",
                    orderId, sent.topic(), sent.partition(), sent.offset());
        }
    }

    static Properties producerConfig() {
        Properties config = new Properties();
        config.put(ProducerConfig.BOOTSTRAP_SERVERS_CONFIG,
                System.getenv().getOrDefault("KADENCE_BOOTSTRAP_SERVERS", "127.0.0.1:9092"));
        // The start is acknowledged only once every in-sync replica has it, and a send the
        // client retries is written once.
        config.put(ProducerConfig.ACKS_CONFIG, "all");
        config.put(ProducerConfig.ENABLE_IDEMPOTENCE_CONFIG, true);
        // The key is the workflow id as UTF-8 (StringSerializer's default encoding). No
        // partitioner is set: the client's default hashes the key with murmur2, the partition
        // Kadence's history service owns for that workflow id.
        config.put(ProducerConfig.KEY_SERIALIZER_CLASS_CONFIG, StringSerializer.class);
        config.put(ProducerConfig.VALUE_SERIALIZER_CLASS_CONFIG, ByteArraySerializer.class);
        return config;
    }

    /** The Kafka record: no partition given, so the producer's partitioner picks it from the key. */
    static ProducerRecord<String, byte[]> startRecord(Schema command, String orderId, double amount) throws IOException {
        ProducerRecord<String, byte[]> record =
                new ProducerRecord<>(TOPIC, orderId, encode(command, startCommand(command, orderId, amount)));
        // Optional for Kadence, but it tells which schema version wrote the value, so the record
        // still decodes after Kadence's Command schema changes.
        record.headers().add(SCHEMA_HEADER, fingerprint(command).getBytes(StandardCharsets.US_ASCII));
        return record;
    }

    /** Command{workflow_id, identity, command = StartWorkflowExecution{...}}: the order workflow's start. */
    static GenericRecord startCommand(Schema command, String orderId, double amount) {
        Schema union = command.getField("command").schema();
        Schema start = union.getTypes().get(union.getIndexNamed("StartWorkflowExecution"));
        Schema payload = start.getField("input").schema().getElementType();
        // The workflow's one argument, Order(order_id, amount), as Kadence's default converter
        // reads it: JSON bytes marked json/plain.
        GenericRecord input = new GenericRecordBuilder(payload)
                .set("metadata", Map.of("encoding", ByteBuffer.wrap("json/plain".getBytes(StandardCharsets.UTF_8))))
                .set("data", ByteBuffer.wrap(orderJson(orderId, amount).getBytes(StandardCharsets.UTF_8)))
                .build();
        // Every field not set takes the schema's default: no request id, no timeouts, the
        // ALLOW_DUPLICATE reuse and FAIL conflict policies, no start delay.
        GenericRecord body = new GenericRecordBuilder(start)
                .set("workflow_type", "OrderWorkflow")
                .set("task_queue", "orders")
                .set("input", List.of(input))
                .build();
        return new GenericRecordBuilder(command)
                .set("workflow_id", orderId)
                .set("identity", IDENTITY)
                .set("command", body)
                .build();
    }

    /** Plain Avro binary: no Schema Registry framing, no container file header. */
    static byte[] encode(Schema schema, GenericRecord record) throws IOException {
        ByteArrayOutputStream out = new ByteArrayOutputStream();
        BinaryEncoder encoder = EncoderFactory.get().directBinaryEncoder(out, null);
        new GenericDatumWriter<GenericRecord>(schema).write(record, encoder);
        encoder.flush();
        return out.toByteArray();
    }

    /**
     * The kadence-schema header: CRC-64-AVRO of the schema's parsing canonical form, as Kadence
     * writes it. Avro's spec (and fastavro, which Kadence uses) gives the fingerprint's bytes in
     * little-endian order, so the long is byte-reversed before it becomes 16 hex digits.
     */
    static String fingerprint(Schema schema) {
        return String.format("%016x", Long.reverseBytes(SchemaNormalization.parsingFingerprint64(schema)));
    }

    static Schema loadCommandSchema(Path schemas) throws IOException {
        // SchemaParser resolves names across all the files it has parsed, whatever their order.
        SchemaParser parser = new SchemaParser();
        for (String name : COMMAND_DEPENDENCIES) {
            parser.parse(schemas.resolve(name + ".avsc"));
        }
        return parser.parse(schemas.resolve("Command.avsc")).mainSchema();
    }

    /**
     * -Dkadence.schemas=DIR, else the repository's schemas/ two levels above this project, found
     * from where this class was loaded (target/classes or target/java-start.jar), so the example
     * runs from any working directory.
     */
    static Path schemasDir() throws URISyntaxException {
        String configured = System.getProperty("kadence.schemas");
        if (configured != null) {
            return Path.of(configured);
        }
        Path loadedFrom = Path.of(StartOrder.class.getProtectionDomain().getCodeSource().getLocation().toURI());
        return loadedFrom.getParent().getParent().resolve("../../schemas").normalize();
    }

    /**
     * {"order_id": ..., "amount": ...} exactly as Python's json.dumps writes it (examples/
     * start_by_topic.py), so both producers send the same bytes. Double.toString matches
     * Python's float repr for ordinary amounts (42.0, 99.99); either way it is a JSON number.
     */
    static String orderJson(String orderId, double amount) {
        if (!Double.isFinite(amount)) {
            throw new IllegalArgumentException("AMOUNT must be a finite number, not " + amount);
        }
        return "{\"order_id\": " + jsonString(orderId) + ", \"amount\": " + amount + "}";
    }

    /** A JSON string as json.dumps escapes it: anything outside printable ASCII as \\uXXXX. */
    static String jsonString(String text) {
        StringBuilder out = new StringBuilder("\"");
        for (char c : text.toCharArray()) {
            switch (c) {
                case '"' -> out.append("\\\"");
                case '\\' -> out.append("\\\\");
                case '\n' -> out.append("\\n");
                case '\r' -> out.append("\\r");
                case '\t' -> out.append("\\t");
                case '\b' -> out.append("\\b");
                case '\f' -> out.append("\\f");
                default -> out.append(c < 0x20 || c > 0x7e ? String.format("\\u%04x", (int) c) : String.valueOf(c));
            }
        }
        return out.append('"').toString();
    }
}
