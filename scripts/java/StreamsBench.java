import java.nio.ByteBuffer;
import java.util.Arrays;
import java.util.Locale;
import java.util.Properties;
import java.util.TreeSet;
import java.util.concurrent.CountDownLatch;
import org.apache.kafka.clients.consumer.ConsumerConfig;
import org.apache.kafka.common.serialization.Serdes;
import org.apache.kafka.common.utils.Bytes;
import org.apache.kafka.streams.CloseOptions;
import org.apache.kafka.streams.KafkaStreams;
import org.apache.kafka.streams.StreamsBuilder;
import org.apache.kafka.streams.StreamsConfig;
import org.apache.kafka.streams.ThreadMetadata;
import org.apache.kafka.streams.TaskMetadata;
import org.apache.kafka.streams.kstream.Consumed;
import org.apache.kafka.streams.kstream.Grouped;
import org.apache.kafka.streams.kstream.Materialized;
import org.apache.kafka.streams.kstream.Produced;
import org.apache.kafka.streams.state.KeyValueStore;

/**
 * The Kafka Streams side of `kshard bench runtime`: the same two applications
 * as `kshard example sum` and `kshard example wordcount`, with the same input
 * and output formats, so that one reader checks and times both systems'
 * outputs.
 *
 * - sum: input key a stream's id, value 16 bytes (sequence number, increment);
 *   each stream's (sequence, running sum) in a RocksDB store, a record out of
 *   sequence fails the application; the latest sum of every stream changed
 *   is published at each commit (the record cache is flushed on commit), as
 *   kshard publishes the latest per stream per transaction.
 * - wordcount: input values lines; words (split on white space, lower case)
 *   repartitioned by word, counted in a RocksDB store, every count's update
 *   published (record cache off), value 8 bytes big-endian as kshard's.
 *
 * Exactly-once v2, one standby replica, the given number of stream threads
 * and commit interval (100 ms is Kafka Streams' default under exactly-once);
 * output timestamps are the inputs' (Kafka Streams' default), which the bench
 * uses for end-to-end latency. Prints "RUNNING active=<tasks> standby=<tasks>" at every
 * transition to RUNNING; closes cleanly on SIGTERM, leaving the group.
 *
 * Usage: scripts/streams-bench.sh sum|wordcount BOOTSTRAP APPLICATION_ID INPUT
 *        OUTPUT STATE_DIR THREADS SESSION_TIMEOUT_MS REPLICATION COMMIT_INTERVAL_MS
 */
public class StreamsBench {
  public static void main(String[] args) throws Exception {
    String mode = args[0], bootstrap = args[1], app = args[2], input = args[3], output = args[4];
    Properties p = new Properties();
    p.put(StreamsConfig.APPLICATION_ID_CONFIG, app);
    p.put(StreamsConfig.BOOTSTRAP_SERVERS_CONFIG, bootstrap);
    p.put(StreamsConfig.STATE_DIR_CONFIG, args[5]);
    p.put(StreamsConfig.NUM_STREAM_THREADS_CONFIG, Integer.parseInt(args[6]));
    p.put(StreamsConfig.PROCESSING_GUARANTEE_CONFIG, StreamsConfig.EXACTLY_ONCE_V2);
    p.put(StreamsConfig.NUM_STANDBY_REPLICAS_CONFIG, 1);
    p.put(StreamsConfig.REPLICATION_FACTOR_CONFIG, Integer.parseInt(args[8]));
    p.put(StreamsConfig.COMMIT_INTERVAL_MS_CONFIG, Long.parseLong(args[9]));
    int session = Integer.parseInt(args[7]);
    p.put(StreamsConfig.consumerPrefix(ConsumerConfig.SESSION_TIMEOUT_MS_CONFIG), session);
    p.put(StreamsConfig.consumerPrefix(ConsumerConfig.HEARTBEAT_INTERVAL_MS_CONFIG), Math.max(session / 3, 100));
    StreamsBuilder b = new StreamsBuilder();
    if (mode.equals("sum")) {
      b.stream(input, Consumed.with(Serdes.String(), Serdes.ByteArray()))
          .groupByKey()
          .aggregate(
              () -> new byte[16],
              (stream, increment, current) -> add(stream, increment, current),
              Materialized.<String, byte[], KeyValueStore<Bytes, byte[]>>as("sums")
                  .withKeySerde(Serdes.String())
                  .withValueSerde(Serdes.ByteArray()))
          .toStream()
          .to(output, Produced.with(Serdes.String(), Serdes.ByteArray()));
    } else if (mode.equals("wordcount")) {
      p.put(StreamsConfig.STATESTORE_CACHE_MAX_BYTES_CONFIG, 0);
      b.stream(input, Consumed.with(Serdes.ByteArray(), Serdes.String()))
          .flatMapValues(line -> Arrays.stream(line.toLowerCase(Locale.ROOT).split("(?U)\\s+"))
              .filter(w -> !w.isEmpty()).toList())
          .groupBy((key, word) -> word, Grouped.with(Serdes.String(), Serdes.String()))
          .count(Materialized.<String, Long, KeyValueStore<Bytes, byte[]>>as("counts"))
          .toStream()
          .to(output, Produced.with(Serdes.String(), Serdes.Long()));
    } else {
      throw new IllegalArgumentException("mode must be sum or wordcount, not " + mode);
    }
    KafkaStreams streams = new KafkaStreams(b.build(), p);
    CountDownLatch closed = new CountDownLatch(1);
    streams.setStateListener((now, before) -> {
      if (now == KafkaStreams.State.RUNNING) {
        TreeSet<String> active = new TreeSet<>(), standby = new TreeSet<>();
        for (ThreadMetadata t : streams.metadataForLocalThreads()) {
          for (TaskMetadata task : t.activeTasks()) {
            active.add(task.taskId().toString());
          }
          for (TaskMetadata task : t.standbyTasks()) {
            standby.add(task.taskId().toString());
          }
        }
        System.out.println("RUNNING active=" + String.join(",", active) + " standby=" + String.join(",", standby));
      } else {
        System.out.println("state " + now);
      }
      System.out.flush();
      if (now == KafkaStreams.State.ERROR || now == KafkaStreams.State.NOT_RUNNING) {
        closed.countDown();
      }
    });
    // SIGTERM: leave the group on the way out, so that a restart waits for
    // no session timeout (Kafka Streams stays in the group by default).
    Runtime.getRuntime().addShutdownHook(new Thread(() -> {
      streams.close(CloseOptions.groupMembershipOperation(CloseOptions.GroupMembershipOperation.LEAVE_GROUP));
      closed.countDown();
    }));
    streams.start();
    closed.await();
  }

  /** Adds one increment to a stream's (sequence, sum), in sequence or not at all. */
  static byte[] add(String stream, byte[] increment, byte[] current) {
    if (increment == null || increment.length != 16) {
      throw new IllegalStateException(stream + ": a value that is not 16 bytes of (seq, increment)");
    }
    ByteBuffer in = ByteBuffer.wrap(increment), now = ByteBuffer.wrap(current);
    long seq = in.getLong(), inc = in.getLong(), last = now.getLong(), sum = now.getLong();
    if (seq != last + 1) {
      throw new IllegalStateException(stream + ": sequence " + seq + " after " + last);
    }
    return ByteBuffer.allocate(16).putLong(seq).putLong(sum + inc).array();
  }
}
