import java.time.Duration;
import java.util.List;
import java.util.Properties;
import org.apache.kafka.clients.consumer.AcknowledgeType;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.KafkaShareConsumer;
import org.apache.kafka.common.serialization.StringDeserializer;

/**
 * The demo's share group (KIP-932): a member that accepts every record of
 * its topic but the ones whose value is "poison", which it releases each
 * time they come: Kafka delivers those again until its delivery count
 * limit, then archives them. It reads at most 20 records a second, for the
 * given seconds.
 *
 * Usage: scripts/share-demo.sh BOOTSTRAP GROUP TOPIC SECONDS
 */
public class ShareDemo {
  public static void main(String[] args) throws Exception {
    String bootstrap = args[0], group = args[1], topic = args[2];
    long until = System.currentTimeMillis() + Long.parseLong(args[3]) * 1000;
    Properties p = new Properties();
    p.put("bootstrap.servers", bootstrap);
    p.put("group.id", group);
    p.put("key.deserializer", StringDeserializer.class.getName());
    p.put("value.deserializer", StringDeserializer.class.getName());
    p.put("share.acknowledgement.mode", "explicit");
    try (KafkaShareConsumer<String, String> consumer = new KafkaShareConsumer<>(p)) {
      consumer.subscribe(List.of(topic));
      while (System.currentTimeMillis() < until) {
        for (ConsumerRecord<String, String> r : consumer.poll(Duration.ofMillis(500))) {
          boolean poison = "poison".equals(r.value());
          consumer.acknowledge(r, poison ? AcknowledgeType.RELEASE : AcknowledgeType.ACCEPT);
          Thread.sleep(50);
        }
        consumer.commitSync();
      }
    }
  }
}
