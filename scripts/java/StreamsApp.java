import java.time.Duration;
import java.util.Properties;
import org.apache.kafka.common.serialization.Serdes;
import org.apache.kafka.common.utils.Bytes;
import org.apache.kafka.streams.KafkaStreams;
import org.apache.kafka.streams.StreamsBuilder;
import org.apache.kafka.streams.StreamsConfig;
import org.apache.kafka.streams.kstream.KStream;
import org.apache.kafka.streams.kstream.Materialized;
import org.apache.kafka.streams.state.KeyValueStore;
import org.apache.kafka.streams.state.Stores;

/**
 * A Kafka Streams application on the streams rebalance protocol (KIP-1071),
 * for kshard's tests: it upper-cases the records of an input topic into an
 * output topic and counts them by key in an in-memory store (so its topology
 * has a state changelog), for the given seconds.
 *
 * Usage: scripts/streams-app.sh BOOTSTRAP APPLICATION_ID INPUT OUTPUT SECONDS
 */
public class StreamsApp {
  public static void main(String[] args) throws Exception {
    String bootstrap = args[0], app = args[1], input = args[2], output = args[3];
    long seconds = Long.parseLong(args[4]);
    Properties p = new Properties();
    p.put(StreamsConfig.APPLICATION_ID_CONFIG, app);
    p.put(StreamsConfig.BOOTSTRAP_SERVERS_CONFIG, bootstrap);
    p.put(StreamsConfig.GROUP_PROTOCOL_CONFIG, "streams");
    p.put(StreamsConfig.DEFAULT_KEY_SERDE_CLASS_CONFIG, Serdes.StringSerde.class);
    p.put(StreamsConfig.DEFAULT_VALUE_SERDE_CLASS_CONFIG, Serdes.StringSerde.class);
    p.put(StreamsConfig.REPLICATION_FACTOR_CONFIG, 1);
    p.put(StreamsConfig.STATE_DIR_CONFIG, System.getProperty("java.io.tmpdir") + "/kshard-streams-" + app);
    p.put(StreamsConfig.COMMIT_INTERVAL_MS_CONFIG, 500);
    StreamsBuilder b = new StreamsBuilder();
    KStream<String, String> in = b.stream(input);
    in.mapValues(v -> v.toUpperCase()).to(output);
    in.groupByKey().count(Materialized.<String, Long>as(Stores.inMemoryKeyValueStore("counts")));
    try (KafkaStreams streams = new KafkaStreams(b.build(), p)) {
      streams.start();
      Thread.sleep(seconds * 1000);
      System.out.println("state " + streams.state());
    }
  }
}
