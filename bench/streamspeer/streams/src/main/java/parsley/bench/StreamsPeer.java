package parsley.bench;

import com.fasterxml.jackson.databind.ObjectMapper;
import com.fasterxml.jackson.databind.node.ObjectNode;
import java.time.Instant;
import java.util.Properties;
import java.util.Set;
import java.util.concurrent.CountDownLatch;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.serialization.Serdes;
import org.apache.kafka.streams.KafkaStreams;
import org.apache.kafka.streams.StreamsBuilder;
import org.apache.kafka.streams.StreamsConfig;
import org.apache.kafka.streams.kstream.Consumed;
import org.apache.kafka.streams.kstream.Produced;
import org.apache.kafka.streams.processor.StateRestoreListener;
import org.apache.kafka.streams.processor.api.FixedKeyProcessor;
import org.apache.kafka.streams.processor.api.FixedKeyProcessorContext;
import org.apache.kafka.streams.processor.api.FixedKeyProcessorSupplier;
import org.apache.kafka.streams.processor.api.FixedKeyRecord;
import org.apache.kafka.streams.state.KeyValueStore;
import org.apache.kafka.streams.state.StoreBuilder;
import org.apache.kafka.streams.state.Stores;

/**
 * The Kafka Streams side of bench/streamspeer. Arguments: brokers
 * application-id input output state-dir stateful|stateless
 * [replication-factor]. Stateful adds each payment's amount to its key's
 * total in a RocksDB store and emits the payment with the total; stateless
 * emits the payment with a fee (mapValues). Everything else is Kafka
 * Streams' default, but processing.guarantee=exactly_once_v2, whose commit
 * interval defaults to 100 ms, and the replication factor of its internal
 * topics (default 1, for one broker). The store has Streams' record cache
 * (statestore.cache.max.bytes, 10 MiB by default), as a DSL aggregation's
 * store has by default; a Processor API store builder leaves it off unless
 * asked.
 *
 * It prints lines "streamspeer-event NAME UNIX_NANOS [details]" on standard
 * output for the driver: ready (the client went RUNNING), restore-start
 * (partition, first and end offset), restore-end (partition, records
 * restored).
 */
public final class StreamsPeer {
  private static final ObjectMapper JSON = new ObjectMapper();

  public static void main(String[] args) throws Exception {
    if (args.length != 6 && args.length != 7) {
      System.err.println("usage: StreamsPeer brokers application-id input output state-dir stateful|stateless [replication-factor]");
      System.exit(2);
    }
    Properties p = new Properties();
    p.put(StreamsConfig.BOOTSTRAP_SERVERS_CONFIG, args[0]);
    p.put(StreamsConfig.APPLICATION_ID_CONFIG, args[1]);
    p.put(StreamsConfig.STATE_DIR_CONFIG, args[4]);
    p.put(StreamsConfig.PROCESSING_GUARANTEE_CONFIG, StreamsConfig.EXACTLY_ONCE_V2);
    p.put(StreamsConfig.REPLICATION_FACTOR_CONFIG, args.length == 7 ? Integer.parseInt(args[6]) : 1);
    p.put(StreamsConfig.consumerPrefix("auto.offset.reset"), "earliest");

    StreamsBuilder b = new StreamsBuilder();
    var in = b.stream(args[2], Consumed.with(Serdes.String(), Serdes.String()));
    switch (args[5]) {
      case "stateful" -> in.processValues(new Fold()).to(args[3], Produced.with(Serdes.String(), Serdes.String()));
      case "stateless" -> in.mapValues(StreamsPeer::withFee).to(args[3], Produced.with(Serdes.String(), Serdes.String()));
      default -> {
        System.err.println("mode must be stateful or stateless, not " + args[5]);
        System.exit(2);
      }
    }
    KafkaStreams ks = new KafkaStreams(b.build(), p);
    CountDownLatch done = new CountDownLatch(1);
    Runtime.getRuntime().addShutdownHook(new Thread(() -> {
      ks.close();
      done.countDown();
    }));
    ks.setUncaughtExceptionHandler(e -> {
      e.printStackTrace();
      return org.apache.kafka.streams.errors.StreamsUncaughtExceptionHandler.StreamThreadExceptionResponse.SHUTDOWN_CLIENT;
    });
    ks.setStateListener((now, before) -> {
      if (now == KafkaStreams.State.RUNNING) {
        event("ready", "");
      }
    });
    ks.setGlobalStateRestoreListener(new StateRestoreListener() {
      @Override
      public void onRestoreStart(TopicPartition tp, String store, long from, long to) {
        event("restore-start", tp.partition() + " " + from + " " + to);
      }

      @Override
      public void onBatchRestored(TopicPartition tp, String store, long batchEnd, long n) {}

      @Override
      public void onRestoreEnd(TopicPartition tp, String store, long total) {
        event("restore-end", tp.partition() + " " + total);
      }
    });
    ks.start();
    done.await();
  }

  static synchronized void event(String name, String details) {
    Instant t = Instant.now();
    System.out.println("streamspeer-event " + name + " " + (t.getEpochSecond() * 1_000_000_000L + t.getNano()) + (details.isEmpty() ? "" : " " + details));
    System.out.flush();
  }

  static String withFee(String v) {
    try {
      ObjectNode n = (ObjectNode) JSON.readTree(v);
      n.put("fee", n.get("amount").asLong() / 100);
      return JSON.writeValueAsString(n);
    } catch (Exception e) {
      throw new IllegalArgumentException("payment " + v, e);
    }
  }

  static final class Fold implements FixedKeyProcessorSupplier<String, String, String> {
    static final String STORE = "totals";

    @Override
    public FixedKeyProcessor<String, String, String> get() {
      return new FixedKeyProcessor<>() {
        private FixedKeyProcessorContext<String, String> ctx;
        private KeyValueStore<String, Long> totals;

        @Override
        public void init(FixedKeyProcessorContext<String, String> c) {
          ctx = c;
          totals = c.getStateStore(STORE);
        }

        @Override
        public void process(FixedKeyRecord<String, String> r) {
          try {
            ObjectNode n = (ObjectNode) JSON.readTree(r.value());
            Long t = totals.get(r.key());
            long total = (t == null ? 0 : t) + n.get("amount").asLong();
            totals.put(r.key(), total);
            n.put("total", total);
            ctx.forward(r.withValue(JSON.writeValueAsString(n)));
          } catch (Exception e) {
            throw new IllegalArgumentException("payment " + r.value(), e);
          }
        }
      };
    }

    @Override
    public Set<StoreBuilder<?>> stores() {
      return Set.of(Stores.keyValueStoreBuilder(Stores.persistentKeyValueStore(STORE), Serdes.String(), Serdes.Long()).withCachingEnabled());
    }
  }
}
