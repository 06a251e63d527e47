package dev.highwater.encoding;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertNotNull;
import static org.junit.jupiter.api.Assertions.assertNull;
import static org.junit.jupiter.api.Assertions.assertTrue;

import com.fasterxml.jackson.databind.ObjectMapper;
import com.sun.net.httpserver.HttpServer;
import java.io.ByteArrayOutputStream;
import java.io.IOException;
import java.net.InetSocketAddress;
import java.nio.ByteBuffer;
import java.nio.charset.StandardCharsets;
import java.util.ArrayList;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.Random;
import org.apache.avro.Schema;
import org.apache.avro.generic.GenericData;
import org.apache.avro.generic.GenericDatumWriter;
import org.apache.avro.io.BinaryEncoder;
import org.apache.avro.io.EncoderFactory;
import org.junit.jupiter.api.AfterAll;
import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.Test;

/**
 * Debezium's Avro read straight into the envelope ({@link AvroEvent}) against the same events
 * read through JSON ({@link AvroJson}, then {@link Debezium}: how the walk read them before):
 * the same answer (taken or not), and when taken the same key, value, time, position and
 * transaction, for AvroConverter's shapes of every column kind, with awkward values drawn at
 * random (bounds of each type, any characters, NaN, empty decimals, unknown ops, deletes).
 */
class AvroEventTest {
  private static final ObjectMapper JSON = new ObjectMapper();
  private static final String COLUMNS =
      "["
          + "{'name':'id','type':'long'},"
          + "{'name':'region','type':['null','string'],'default':null},"
          + "{'name':'amount','type':['null',{'type':'bytes','scale':2,'precision':10,"
          + "'connect.version':1,'connect.parameters':{'scale':'2',"
          + "'connect.decimal.precision':'10'},'connect.name':'org.apache.kafka.connect.data.Decimal',"
          + "'logicalType':'decimal'}],'default':null},"
          + "{'name':'price','type':{'type':'bytes','logicalType':'decimal','scale':3,'precision':9}},"
          + "{'name':'created','type':['null',{'type':'long','connect.version':1,"
          + "'connect.name':'io.debezium.time.MicroTimestamp'}],'default':null},"
          + "{'name':'stamp','type':{'type':'long','logicalType':'timestamp-millis'}},"
          + "{'name':'day','type':['null',{'type':'int','connect.version':1,"
          + "'connect.name':'io.debezium.time.Date'}],'default':null},"
          + "{'name':'at','type':{'type':'long','connect.name':'io.debezium.time.MicroTime'}},"
          + "{'name':'nanos','type':{'type':'long','connect.name':'io.debezium.time.NanoTimestamp'}},"
          + "{'name':'vsd','type':['null',{'type':'record','name':'VariableScaleDecimal',"
          + "'namespace':'io.debezium.data','fields':[{'name':'scale','type':'int'},"
          + "{'name':'value','type':'bytes'}],'connect.doc':'Variable scaled decimal',"
          + "'connect.version':1,'connect.name':'io.debezium.data.VariableScaleDecimal'}],"
          + "'default':null},"
          + "{'name':'zoned','type':['null',{'type':'string','connect.version':1,"
          + "'connect.name':'io.debezium.time.ZonedTimestamp'}],'default':null},"
          + "{'name':'score','type':'double'},"
          + "{'name':'ratio','type':['null','float'],'default':null},"
          + "{'name':'flag','type':'boolean'},"
          + "{'name':'small','type':{'type':'int','connect.type':'int16'}},"
          + "{'name':'tags','type':['null',{'type':'array','items':'string'}],'default':null},"
          + "{'name':'blob','type':['null','bytes'],'default':null},"
          + "{'name':'doc','type':['null',{'type':'string','connect.version':1,"
          + "'connect.name':'io.debezium.data.Json'}],'default':null},"
          + "{'name':'attrs','type':['null',{'type':'map','values':'long'}],'default':null},"
          + "{'name':'kind','type':['null',{'type':'enum','name':'Kind','symbols':['SMALL','LARGE']}],"
          + "'default':null},"
          + "{'name':'raw','type':['null',{'type':'fixed','name':'Raw','size':4}],'default':null}"
          + "]";
  private static final String VALUE =
      "{'type':'record','name':'Envelope','namespace':'pg.public.orders','fields':["
          + "{'name':'before','type':['null',{'type':'record','name':'Value','fields':"
          + COLUMNS
          + ",'connect.name':'pg.public.orders.Value'}],'default':null},"
          + "{'name':'after','type':['null','Value'],'default':null},"
          + "{'name':'source','type':{'type':'record','name':'Source','namespace':'io.debezium.connector.postgresql','fields':["
          + "{'name':'version','type':'string'},{'name':'connector','type':'string'},"
          + "{'name':'name','type':'string'},{'name':'ts_ms','type':'long'},"
          + "{'name':'snapshot','type':[{'type':'string','connect.version':1,'connect.parameters':"
          + "{'allowed':'true,last,false,incremental'},'connect.default':'false',"
          + "'connect.name':'io.debezium.data.Enum'},'null'],'default':'false'},"
          + "{'name':'db','type':'string'},{'name':'sequence','type':['null','string'],'default':null},"
          + "{'name':'ts_us','type':['null','long'],'default':null},"
          + "{'name':'ts_ns','type':['null','long'],'default':null},"
          + "{'name':'schema','type':'string'},{'name':'table','type':'string'},"
          + "{'name':'txId','type':['null','long'],'default':null},"
          + "{'name':'lsn','type':['null','long'],'default':null},"
          + "{'name':'xmin','type':['null','long'],'default':null}]}},"
          + "{'name':'transaction','type':['null',{'type':'record','name':'block','namespace':"
          + "'event','fields':[{'name':'id','type':'string'},{'name':'total_order','type':'long'},"
          + "{'name':'data_collection_order','type':'long'}],'connect.version':1,"
          + "'connect.name':'event.block'}],'default':null},"
          + "{'name':'op','type':'string'},"
          + "{'name':'ts_ms','type':['null','long'],'default':null},"
          + "{'name':'ts_us','type':['null','long'],'default':null}"
          + "],'connect.name':'pg.public.orders.Envelope'}";
  private static final String KEY =
      "{'type':'record','name':'Key','namespace':'pg.public.orders','fields':["
          + "{'name':'id','type':'long'},{'name':'region','type':['null','string']}]}";

  private static HttpServer server;
  private static final Map<Integer, String> SCHEMAS = new HashMap<>();
  private static Registry registry;

  @BeforeAll
  static void registry() throws IOException {
    server = HttpServer.create(new InetSocketAddress("127.0.0.1", 0), 0);
    server.createContext(
        "/schemas/ids/",
        exchange -> {
          String path = exchange.getRequestURI().getPath();
          String schema = SCHEMAS.get(Integer.parseInt(path.substring(path.lastIndexOf('/') + 1)));
          byte[] body =
              schema == null
                  ? new byte[0]
                  : JSON.writeValueAsBytes(Map.of("schema", schema));
          exchange.sendResponseHeaders(schema == null ? 404 : 200, body.length == 0 ? -1 : body.length);
          if (body.length > 0) {
            exchange.getResponseBody().write(body);
          }
          exchange.close();
        });
    server.start();
    registry = new Registry("http://127.0.0.1:" + server.getAddress().getPort(), null);
  }

  @AfterAll
  static void stop() {
    server.stop(0);
  }

  private static Schema avro(String singleQuoted) {
    return new Schema.Parser().parse(singleQuoted.replace('\'', '"'));
  }

  private static int register(int id, Schema schema) {
    SCHEMAS.put(id, schema.toString());
    return id;
  }

  // the table's value and key schemas, registered as ids 101 and 102
  private static final Schema VALUE_SCHEMA = avro(VALUE);
  private static final Schema KEY_SCHEMA = avro(KEY);
  private static final int VALUE_ID = register(101, VALUE_SCHEMA);
  private static final int KEY_ID = register(102, KEY_SCHEMA);

  @Test
  void aPostgresqlTableOfEveryColumnKindIsReadStraightAsThroughJson() throws IOException {
    Schema value = VALUE_SCHEMA;
    Schema key = KEY_SCHEMA;
    int valueId = VALUE_ID;
    int keyId = KEY_ID;
    assertNotNull(registry.schema(valueId).event, "the value schema has a plan");
    assertTrue(registry.schema(keyId).keyable, "the key schema is read straight");
    Random random = new Random(20261128);
    int taken = 0;
    int n = 4000;
    for (int k = 0; k < n; k++) {
      GenericData.Record v = event(value, random);
      GenericData.Record kk = new GenericData.Record(key);
      kk.put("id", random.nextLong());
      kk.put("region", random.nextInt(4) == 0 ? null : text(random));
      byte[] keyBytes = wire(keyId, key, kk);
      byte[] valueBytes = wire(valueId, value, v);
      for (boolean diff : new boolean[] {true, false}) {
        taken += same(keyBytes, valueBytes, diff, Map.of()) ? 1 : 0;
      }
      if (k % 20 == 0) { // bytes left over, or cut short: neither reading takes them
        int cut = random.nextInt(valueBytes.length);
        same(keyBytes, java.util.Arrays.copyOf(valueBytes, valueBytes.length + 1), true, Map.of());
        same(java.util.Arrays.copyOf(keyBytes, keyBytes.length + 1), valueBytes, true, Map.of());
        same(keyBytes, java.util.Arrays.copyOf(valueBytes, Math.max(cut, 5)), true, Map.of());
      }
    }
    // the draws are awkward on purpose, but most events are fine ones: both readings take them
    assertTrue(taken > n, "taken: " + taken + " of " + 2 * n);
  }

  // a source block with every member EventPlace reads, of every connector it places
  private static String anySource(String snapshot, String ts) {
    return "{'name':'source','type':{'type':'record','name':'Source','namespace':'io.debezium.any','fields':["
        + "{'name':'version','type':'string'},{'name':'connector','type':'string'},"
        + "{'name':'ts_ms','type':" + ts + "},"
        + "{'name':'snapshot','type':" + snapshot + "},"
        + "{'name':'sequence','type':['null','string'],'default':null},"
        + "{'name':'ts_us','type':['null','long'],'default':null},"
        + "{'name':'ts_ns','type':['long','null']},"
        + "{'name':'file','type':['null','string'],'default':null},"
        + "{'name':'pos','type':['null','long'],'default':null},"
        + "{'name':'row','type':['null','int'],'default':null},"
        + "{'name':'gtid','type':['null','string'],'default':null},"
        + "{'name':'name','type':'string'},{'name':'db','type':'string'},"
        + "{'name':'schema','type':'string'},{'name':'table','type':'string'},"
        + "{'name':'txId','type':['null','long'],'default':null},"
        + "{'name':'lsn','type':['null','long'],'default':null},"
        + "{'name':'xmin','type':['null','long'],'default':null}]}},";
  }

  private static final String[] CONNECTORS = {
    "postgresql", "mysql", "mariadb", "oracle", "post\"gresql", "mysql\\", "", "PostgreSQL"
  };
  private static final String[] SNAPSHOTS = {
    "true", "last", "false", "incremental", "fal\"se", "fa\\lse", "false\n", "", "é"
  };
  private static final String[] SEQUENCES = {
    "[\"1\",\"2\"]", "[null,\"5\"]", " [ \"10\" , \"20\" ]\t", "[\"1\",2]", "[1,2]", "[\"x\",\"2\"]",
    "[\"1\",\"2\"", "[\"1\",\"2\"]x", "[\"1\",\"-2\"]", "[\"123456789012345678\",\"1\"]",
    "[\"1234567890123456789\",\"1\"]", "[\"1\"\n,\"2\"]", "[\"1\",\"2\"]\"", "", "[]", "[null,null]"
  };
  private static final String[] FILES = {
    "mysql-bin.000003", "bin.12a", "", ".", "a.0000000000000000001", "000007", "b\".3", "c\\.4", "x.\u00e9"
  };
  private static final String[] IDS = {"123:456", "abc", "\u00e9:1", "a\"b", ":5", "5:", "1:2:3", "7", "1\\2"};

  @Test
  void sourcesOfEveryConnectorAndShapeArePlacedStraightAsThroughJson() throws IOException {
    String[][] shapes = { // snapshot, ts_ms: as Debezium 2 writes them, as older ones did
      {"['null','string']", "'long'"}, {"['null','boolean']", "['null','long']"}
    };
    Random random = new Random(20261207);
    Map<String, long[]> commits = Map.of("7", new long[] {1_700_000_000_123_000_000L, 0});
    int taken = 0;
    int n = 0;
    for (int shape = 0; shape < shapes.length; shape++) {
      String text = VALUE.replaceFirst(
          "\\{'name':'source'.*?\\]\\}\\},", java.util.regex.Matcher.quoteReplacement(
              anySource(shapes[shape][0], shapes[shape][1])));
      Schema value = avro(text);
      int valueId = register(201 + shape, value);
      assertNotNull(registry.schema(valueId).event, "the value schema has a plan");
      for (int k = 0; k < 3000; k++) {
        GenericData.Record e = event(value, random);
        Schema sourceSchema = value.getField("source").schema();
        GenericData.Record source = new GenericData.Record(sourceSchema);
        source.put("version", "2.7.0.Final");
        source.put("connector", CONNECTORS[random.nextInt(CONNECTORS.length)]);
        long ms = pick(random, 1_700_000_000_000L + random.nextInt(1_000_000), -1L, Long.MAX_VALUE / 1000, 0L);
        source.put("ts_ms", shape == 1 && random.nextInt(5) == 0 ? null : ms);
        source.put(
            "snapshot",
            random.nextInt(6) == 0
                ? null
                : shape == 1 ? (Object) random.nextBoolean() : SNAPSHOTS[random.nextInt(SNAPSHOTS.length)]);
        source.put("sequence", random.nextInt(8) == 0 ? null : SEQUENCES[random.nextInt(SEQUENCES.length)]);
        source.put("ts_us", random.nextInt(3) == 0 ? null : ms * 1000 + random.nextInt(1000));
        source.put("ts_ns", random.nextInt(3) == 0 ? null : pick(random, ms * 1_000_000L, -5L, Long.MIN_VALUE));
        source.put("file", random.nextInt(6) == 0 ? null : FILES[random.nextInt(FILES.length)]);
        source.put("pos", random.nextInt(6) == 0 ? null : pick(random, (long) random.nextInt(1 << 20), -1L, Long.MAX_VALUE));
        source.put("row", random.nextInt(6) == 0 ? null : pick(random, random.nextInt(4), -1, 100_000, 99_999));
        source.put("gtid", random.nextBoolean() ? null : text(random));
        for (String name : new String[] {"name", "db", "schema", "table"}) {
          source.put(name, "x");
        }
        e.put("source", source);
        if (e.get("transaction") != null && random.nextBoolean()) {
          ((GenericData.Record) e.get("transaction")).put("id", IDS[random.nextInt(IDS.length)]);
        }
        byte[] valueBytes = wire(valueId, value, e);
        GenericData.Record kk = new GenericData.Record(KEY_SCHEMA);
        kk.put("id", random.nextLong());
        kk.put("region", null);
        taken += same(wire(KEY_ID, KEY_SCHEMA, kk), valueBytes, random.nextBoolean(), commits) ? 1 : 0;
        n++;
      }
    }
    // every connector's events are placed by one or the other way, and some are not taken
    assertTrue(taken > n / 5 && taken < n, "taken: " + taken + " of " + n);
  }

  @Test
  void schemasItCannotSayAsJsonWouldAreReadThroughJson() {
    // a map in the key (JSON refuses a name twice), an image that is not the Connect schema's
    // record, a decimal column written as a string
    assertTrue(!AvroEvent.keyable(AvroJson.parse(tree(
        "{'type':'record','name':'K','fields':[{'name':'m','type':{'type':'map','values':'int'}}]}"))));
    Schema oddImage =
        avro(VALUE.replace("{'name':'after','type':['null','Value'],'default':null}",
            "{'name':'after','type':['null','Value','string'],'default':null}"));
    assertNull(registry.schema(register(103, oddImage)).event);
    Schema stringDecimal =
        avro(VALUE.replace(
            "{'name':'price','type':{'type':'bytes','logicalType':'decimal','scale':3,'precision':9}}",
            "{'name':'price','type':{'type':'string','connect.name':'org.apache.kafka.connect.data.Decimal',"
                + "'connect.parameters':{'scale':'3'}}}"));
    assertNull(registry.schema(register(104, stringDecimal)).event);
  }

  @Test
  void aMapWithANameTwiceIsTakenByNeither() throws IOException {
    Schema value = VALUE_SCHEMA;
    Schema key = KEY_SCHEMA;
    int valueId = VALUE_ID;
    int keyId = KEY_ID;
    Random random = new Random(7);
    GenericData.Record k = new GenericData.Record(key);
    k.put("id", 1L);
    k.put("region", null);
    byte[] keyBytes = wire(keyId, key, k);
    byte[] valueBytes;
    int tries = 0;
    do { // an event both readings take, its after holding the map {"a": 1, "b": 1}
      GenericData.Record v = event(value, random);
      v.put("op", "c");
      v.put("before", null);
      GenericData.Record after = (GenericData.Record) v.get("after");
      for (String column : new String[] {"tags", "doc", "region", "blob", "zoned"}) {
        after.put(column, null);
      }
      Map<String, Long> attrs = new java.util.LinkedHashMap<>();
      attrs.put("a", 1L);
      attrs.put("b", 1L);
      after.put("attrs", attrs);
      valueBytes = wire(valueId, value, v);
    } while (!same(keyBytes, valueBytes, true, Map.of()) && ++tries < 100);
    assertTrue(tries < 100, "an event both take");
    byte[] pair = {2, 'a', 2, 2, 'b', 2};
    int at = -1;
    for (int i = 0; i + pair.length <= valueBytes.length && at < 0; i++) {
      at = java.util.Arrays.equals(valueBytes, i, i + pair.length, pair, 0, pair.length) ? i : -1;
    }
    assertTrue(at >= 0, "the map's entries in the event");
    valueBytes[at + 4] = 'a';
    assertTrue(!same(keyBytes, valueBytes, true, Map.of()), "a name twice is not taken");
  }

  // the output's types for the table's columns drawn from, each column's usual one first
  private static final String[][] OUTPUT = {
    {"id", "long"}, {"region", "string"}, {"amount", "double"}, {"price", "float"},
    {"created", "string"}, {"stamp", "string"}, {"day", "string"}, {"at", "string"},
    {"nanos", "string"}, {"vsd", "double"}, {"zoned", "string"}, {"score", "double"},
    {"ratio", "float"}, {"flag", "boolean"}, {"small", "int"}, {"tags", "string"},
    {"blob", "string"}, {"doc", "string"}, {"attrs", "string"}, {"kind", "string"},
    {"raw", "string"}
  };
  private static final String[] TYPES = {"string", "long", "int", "double", "float", "boolean"};

  @Test
  void imagesWrittenStraightInAnAvroRoutesRowsAreWhatTheEnvelopeWrittenAgainIs() throws IOException {
    // Debezium Avro to Avro output: the images written in the route's row record (AvroRow)
    // against the envelope written by the same reading, then by the route (AvroOut: before).
    // Each column's output type drawn (mostly its usual one; any of the six now and then), the
    // columns' order shuffled, a column the table lacks (null) and one it has not (a schema
    // change: neither takes it) now and then.
    long seed = System.nanoTime();
    Random random = new Random(seed);
    int taken = 0;
    int straight = 0;
    int n = 3000;
    for (int k = 0; k < n; k++) {
      boolean diff = random.nextBoolean();
      Avro avro = new Avro(route(random, diff), "out");
      GenericData.Record v = event(VALUE_SCHEMA, random);
      if (random.nextBoolean()) { // no array or map: most events' columns are then written
        for (String image : new String[] {"after", "before"}) {
          GenericData.Record row = (GenericData.Record) v.get(image);
          if (row != null) {
            row.put("tags", null);
            row.put("attrs", null);
          }
        }
      }
      GenericData.Record kk = new GenericData.Record(KEY_SCHEMA);
      kk.put("id", random.nextLong());
      kk.put("region", random.nextInt(4) == 0 ? null : text(random));
      byte[] key = wire(KEY_ID, KEY_SCHEMA, kk);
      byte[] value = wire(VALUE_ID, VALUE_SCHEMA, v);
      Encoding.Encoded a = new Encoding.Encoded();
      boolean rows = new DebeziumAvro(diff, Map.of(), registry, avro).encode(key, value, a);
      Encoding.Encoded b = new Encoding.Encoded();
      boolean envelope =
          new AvroOut(new DebeziumAvro(diff, Map.of(), registry), avro, false).encode(key, value, b);
      String where = "seed " + seed + ", draw " + k + ": " + JSON.valueToTree(List.of(key, value));
      assertEquals(envelope, rows, "taken through the envelope, straight: " + where);
      boolean planned = registry.schema(VALUE_ID).event.rows(avro.columns(), diff) != null;
      if (rows) {
        taken += planned ? 1 : 0;
        assertArrayEquals(b.key, a.key, where);
        assertArrayEquals(b.value, a.value, where);
        assertArrayEquals(b.ts, a.ts, where);
        assertArrayEquals(b.position, a.position, where);
        assertEquals(b.tx, a.tx, where);
      }
      straight += planned ? 1 : 0;
    }
    // most draws have a plan, and (the draws are awkward on purpose) some of those are taken
    assertTrue(straight > n / 2, "planned straight: " + straight + " of " + n);
    assertTrue(taken > n / 10, "taken straight: " + taken + " of " + n + ", seed " + seed);
  }

  // a table of each plain type and decimals, its string first (see below), for every pair of
  // a column's Avro and an output type
  private static final String NARROW_COLUMNS =
      "["
          + "{'name':'s','type':['null','string'],'default':null},"
          + "{'name':'l','type':['null','long'],'default':null},"
          + "{'name':'i','type':'int'},"
          + "{'name':'d','type':['null','double'],'default':null},"
          + "{'name':'f','type':'float'},"
          + "{'name':'b','type':['null','boolean'],'default':null},"
          + "{'name':'m','type':['null',{'type':'bytes','scale':2,'precision':10,"
          + "'connect.parameters':{'scale':'2'},'connect.name':'org.apache.kafka.connect.data.Decimal',"
          + "'logicalType':'decimal'}],'default':null},"
          + "{'name':'z','type':{'type':'bytes','scale':0,'precision':30,"
          + "'connect.parameters':{'scale':'0'},'connect.name':'org.apache.kafka.connect.data.Decimal',"
          + "'logicalType':'decimal'}},"
          + "{'name':'w','type':{'type':'bytes','scale':30,'precision':40,"
          + "'connect.parameters':{'scale':'30'},'connect.name':'org.apache.kafka.connect.data.Decimal',"
          + "'logicalType':'decimal'}}"
          + "]";
  private static final Schema NARROW_SCHEMA =
      avro(VALUE.replace(COLUMNS, NARROW_COLUMNS).replace("'Value'", "'Narrow'")
          .replace("'name':'Value'", "'name':'Narrow'"));
  private static final int NARROW_ID = register(105, NARROW_SCHEMA);
  private static final long[] LONGS = { // bounds, and a float's tie once a double rounds it
    0L, -1L, 1L, Integer.MAX_VALUE, Integer.MIN_VALUE, Integer.MAX_VALUE + 1L, Long.MAX_VALUE,
    Long.MIN_VALUE, (1L << 53) + 1, (1L << 60) + (1L << 36) + 1, -((1L << 60) + (1L << 36) + 1)
  };
  private static final double[] DOUBLES = {
    0.0, -0.0, Double.NaN, Double.POSITIVE_INFINITY, Double.NEGATIVE_INFINITY, Double.MAX_VALUE,
    -Double.MAX_VALUE, Double.MIN_VALUE, 3.4028235677973366e38, 3.4028235e38, 1e-46, 0.1, 1e16, 2.5
  };

  @Test
  void everyPairOfAColumnsAvroAndAnOutputTypeIsWrittenAsTheEnvelopeWrittenAgainIs()
      throws IOException {
    long seed = System.nanoTime();
    Random random = new Random(seed);
    String[] names = {"s", "l", "i", "d", "f", "b", "m", "z", "w"};
    String[][] usual = { // each column's usual types
      {"string"}, {"long", "double", "float"}, {"int", "long", "float"}, {"double", "float"},
      {"float", "double"}, {"boolean"}, {"double", "float"}, {"long", "double", "float"},
      {"double", "float"}
    };
    assertNotNull(registry.schema(NARROW_ID).event, "the table's events are read straight");
    int taken = 0;
    int n = 4000;
    for (int k = 0; k < n; k++) {
      List<List<Object>> columns = new ArrayList<>();
      for (int c = 0; c < names.length; c++) { // mostly its usual type: most events fit
        String type =
            random.nextInt(4) == 0
                ? TYPES[random.nextInt(TYPES.length)]
                : usual[c][random.nextInt(usual[c].length)];
        columns.add(List.of(names[c], type, random.nextInt(10) != 0));
      }
      java.util.Collections.shuffle(columns, random);
      Map<String, Object> spec = new HashMap<>(JSON.convertValue(route(random, true), Map.class));
      spec.put("columns", columns);
      spec.put("diff", random.nextBoolean());
      Avro avro = new Avro(JSON.valueToTree(spec), "out");
      boolean diff = (Boolean) spec.get("diff");
      GenericData.Record v = event(NARROW_SCHEMA, random, AvroEventTest::narrow);
      v.put("before", null); // so the after's string length is at a known place: b[8]
      GenericData.Record kk = new GenericData.Record(KEY_SCHEMA);
      kk.put("id", random.nextLong());
      kk.put("region", text(random));
      byte[] key = wire(KEY_ID, KEY_SCHEMA, kk);
      byte[] value = wire(NARROW_ID, NARROW_SCHEMA, v);
      if (value[6] == 2 && value[7] == 2 && value[8] >= 0 && random.nextBoolean()) {
        // the string's length in a varint longer than it needs (Avro's readers take it)
        byte[] padded = new byte[value.length + 1];
        System.arraycopy(value, 0, padded, 0, 8);
        padded[8] = (byte) (value[8] | 0x80);
        System.arraycopy(value, 9, padded, 10, value.length - 9);
        value = padded;
      }
      Encoding.Encoded a = new Encoding.Encoded();
      boolean rows = new DebeziumAvro(diff, Map.of(), registry, avro).encode(key, value, a);
      Encoding.Encoded b = new Encoding.Encoded();
      boolean envelope =
          new AvroOut(new DebeziumAvro(diff, Map.of(), registry), avro, false).encode(key, value, b);
      String where = "seed " + seed + ", draw " + k + ": " + columns + " " + v;
      assertEquals(envelope, rows, "taken through the envelope, straight: " + where);
      if (rows) {
        taken += registry.schema(NARROW_ID).event.rows(avro.columns(), diff) != null ? 1 : 0;
        assertArrayEquals(b.key, a.key, where);
        assertArrayEquals(b.value, a.value, where);
      }
    }
    assertTrue(taken > n / 10, "taken: " + taken + " of " + n + ", seed " + seed);
  }

  private static GenericData.Record narrow(Schema row, Random r) {
    GenericData.Record v = new GenericData.Record(row);
    v.put("s", r.nextInt(5) == 0 ? null : pick(r, text(r), "1", "-2.5", "true", "null", "1e400"));
    long l = r.nextInt(3) == 0 ? LONGS[r.nextInt(LONGS.length)] : r.nextLong() >> r.nextInt(64);
    v.put("l", r.nextInt(5) == 0 ? null : l);
    v.put("i", (int) (r.nextInt(3) == 0 ? LONGS[r.nextInt(LONGS.length)] : r.nextInt() >> r.nextInt(32)));
    double d = r.nextInt(3) == 0 ? DOUBLES[r.nextInt(DOUBLES.length)] : r.nextGaussian() * Math.pow(10, r.nextInt(80) - 40);
    v.put("d", r.nextInt(5) == 0 ? null : d);
    v.put("f", r.nextInt(3) == 0 ? (float) DOUBLES[r.nextInt(DOUBLES.length)] : (float) (r.nextGaussian() * Math.pow(10, r.nextInt(20) - 10)));
    v.put("b", r.nextInt(5) == 0 ? null : r.nextBoolean());
    v.put("m", r.nextInt(5) == 0 ? null : ByteBuffer.wrap(decimal(r)));
    v.put("z", ByteBuffer.wrap(decimal(r)));
    v.put("w", ByteBuffer.wrap(decimal(r)));
    return v;
  }

  /** An Avro route of the table, its columns' types drawn (see OUTPUT). */
  private static com.fasterxml.jackson.databind.JsonNode route(Random r, boolean diff) {
    List<List<Object>> columns = new ArrayList<>();
    for (String[] column : OUTPUT) {
      if (r.nextInt(200) == 0) {
        continue; // a column the table has not: a schema change
      }
      String type = r.nextInt(8) == 0 ? TYPES[r.nextInt(TYPES.length)] : column[1];
      columns.add(List.of(column[0], type, true));
    }
    if (r.nextInt(10) == 0) {
      columns.add(List.of("extra", TYPES[r.nextInt(TYPES.length)], true));
    }
    java.util.Collections.shuffle(columns, r);
    Map<String, Object> spec = new HashMap<>();
    spec.put("kind", "avro");
    spec.put("columns", columns);
    spec.put("key", List.of(List.of("id", "long", false), List.of("region", "string", true)));
    spec.put("key_header", "0000000001");
    spec.put("value_header", r.nextInt(10) == 0 ? null : "0000000002");
    spec.put("diff", diff);
    spec.put("key_in_value", r.nextBoolean());
    spec.put("topic_in_value", r.nextBoolean());
    spec.put("updated", r.nextInt(4) != 0);
    spec.put("mvcc_timestamp", r.nextBoolean());
    return JSON.valueToTree(spec);
  }

  private static com.fasterxml.jackson.databind.JsonNode tree(String singleQuoted) {
    try {
      return JSON.readTree(singleQuoted.replace('\'', '"'));
    } catch (IOException e) {
      throw new IllegalStateException(e);
    }
  }

  /** Both readings of one event: the same answer and output; whether they took it. */
  private static boolean same(byte[] key, byte[] value, boolean diff, Map<String, long[]> commits) {
    Encoding.Encoded straight = new Encoding.Encoded();
    boolean a = new DebeziumAvro(diff, commits, registry).encode(key, value, straight);
    Encoding.Encoded through = new Encoding.Encoded();
    boolean b = throughJson(key, value, diff, commits, through);
    String where = JSON.valueToTree(List.of(key, value)).toString();
    assertEquals(b, a, "taken through JSON, straight: " + where);
    if (a) {
      assertArrayEquals(through.key, straight.key, where);
      assertEquals(
          through.value == null ? null : new String(through.value, StandardCharsets.UTF_8),
          straight.value == null ? null : new String(straight.value, StandardCharsets.UTF_8),
          where);
      assertArrayEquals(through.ts, straight.ts, where);
      assertArrayEquals(through.position, straight.position, where);
      assertEquals(through.tx, straight.tx, where);
      assertEquals(through.within, straight.within, where);
    }
    return a;
  }

  /** How the walk read the event before: each payload as JSON, then read as Debezium's JSON. */
  private static boolean throughJson(
      byte[] key, byte[] value, boolean diff, Map<String, long[]> commits, Encoding.Encoded out) {
    Registry.Schema keySchema = registry.schema(id(key));
    Registry.Schema valueSchema = registry.schema(id(value));
    byte[] k = payload(key, keySchema);
    byte[] v = payload(value, valueSchema);
    return k != null && v != null && new Debezium(diff, commits).encode(k, v, valueSchema.typed, out);
  }

  private static byte[] payload(byte[] wire, Registry.Schema schema) {
    Encoding.Buffer o = new Encoding.Buffer();
    int[] at = {5};
    if (!AvroJson.read(schema.node, wire, at, o, 0) || at[0] != wire.length) {
      return null;
    }
    return o.copy(0);
  }

  private static long id(byte[] wire) {
    return ByteBuffer.wrap(wire, 1, 4).getInt();
  }

  private static byte[] wire(int id, Schema schema, GenericData.Record record) throws IOException {
    ByteArrayOutputStream bytes = new ByteArrayOutputStream();
    bytes.write(0);
    bytes.write(ByteBuffer.allocate(4).putInt(id).array());
    BinaryEncoder encoder = EncoderFactory.get().binaryEncoder(bytes, null);
    new GenericDatumWriter<GenericData.Record>(schema).write(record, encoder);
    encoder.flush();
    return bytes.toByteArray();
  }

  private static final String[] OPS = {
    "c", "u", "d", "r", "c", "u", "d", "c", "u", "u", "c", "u", "d", "c", "x", "cc", ""
  };

  private static GenericData.Record event(Schema envelope, Random r) {
    return event(envelope, r, AvroEventTest::row);
  }

  private static GenericData.Record event(
      Schema envelope,
      Random r,
      java.util.function.BiFunction<Schema, Random, GenericData.Record> rows) {
    GenericData.Record e = new GenericData.Record(envelope);
    Schema row = envelope.getField("before").schema().getTypes().get(1);
    String op = OPS[r.nextInt(OPS.length)];
    e.put("op", op);
    e.put("before", op.equals("c") || r.nextInt(3) == 0 ? null : rows.apply(row, r));
    e.put("after", op.equals("d") && r.nextInt(8) != 0 ? null : rows.apply(row, r));
    Schema sourceSchema = envelope.getField("source").schema();
    GenericData.Record source = new GenericData.Record(sourceSchema);
    source.put("version", "2.7.0.Final");
    source.put("connector", r.nextInt(10) == 0 ? "oracle" : "postgresql");
    source.put("name", "pg");
    long ms = 1_700_000_000_000L + r.nextInt(1_000_000_000);
    source.put("ts_ms", ms);
    source.put("snapshot", op.equals("r") ? (r.nextBoolean() ? "true" : "last") : "false");
    source.put("db", "shop");
    long lsn = 1_000_000L + r.nextInt(1_000_000);
    source.put(
        "sequence",
        r.nextInt(10) == 0 ? null : "[\"" + (lsn - 10) + "\",\"" + lsn + "\"]");
    source.put("ts_us", r.nextInt(3) == 0 ? null : ms * 1000 + r.nextInt(1000));
    source.put("ts_ns", null);
    source.put("schema", "public");
    source.put("table", "orders");
    source.put("txId", (long) r.nextInt(100_000));
    source.put("lsn", lsn);
    source.put("xmin", null);
    e.put("source", source);
    if (r.nextInt(3) == 0) {
      Schema block = envelope.getField("transaction").schema().getTypes().get(1);
      GenericData.Record tx = new GenericData.Record(block);
      tx.put("id", r.nextInt(100) + ":" + lsn);
      tx.put("total_order", (long) r.nextInt(10));
      tx.put("data_collection_order", (long) r.nextInt(10));
      e.put("transaction", tx);
    }
    e.put("ts_ms", r.nextBoolean() ? null : ms + 5);
    e.put("ts_us", null);
    return e;
  }

  private static GenericData.Record row(Schema row, Random r) {
    GenericData.Record v = new GenericData.Record(row);
    v.put("id", pick(r, r.nextLong(), 0L, Long.MIN_VALUE, Long.MAX_VALUE, -1L));
    v.put("region", r.nextInt(5) == 0 ? null : text(r));
    v.put("amount", r.nextInt(5) == 0 ? null : ByteBuffer.wrap(decimal(r)));
    v.put("price", ByteBuffer.wrap(decimal(r)));
    v.put("created", r.nextInt(5) == 0 ? null : moment(r));
    v.put("stamp", moment(r) / 1000);
    v.put("day", r.nextInt(5) == 0 ? null : pick(r, r.nextInt(40_000) - 20_000, 0, Integer.MIN_VALUE, 2_932_896, 2_932_897, -719_162, -719_163));
    v.put("at", pick(r, (long) r.nextInt(86_400_000) * 1000 + r.nextInt(1000), 0L, -1L, 86_400_000_000L, Long.MIN_VALUE));
    v.put("nanos", moment(r) * 1000 + r.nextInt(1000));
    if (r.nextInt(4) == 0) {
      v.put("vsd", null);
    } else {
      GenericData.Record vsd =
          new GenericData.Record(row.getField("vsd").schema().getTypes().get(1));
      vsd.put("scale", pick(r, r.nextInt(20), 0, -3, 1000, 1001, -1001, Integer.MIN_VALUE));
      vsd.put("value", ByteBuffer.wrap(decimal(r)));
      v.put("vsd", vsd);
    }
    v.put("zoned", r.nextInt(4) == 0 ? null : "2026-11-28T09:00:00.123456Z");
    v.put("score", pick(r, r.nextGaussian() * Math.pow(10, r.nextInt(40) - 20), 0.0, -0.0, Double.NaN, 1e16, 1e-6, Double.MAX_VALUE, Double.MIN_VALUE, 0.1));
    v.put("ratio", r.nextInt(4) == 0 ? null : pick(r, r.nextFloat(), Float.NaN, 3.4e38f, 1e-7f));
    v.put("flag", r.nextBoolean());
    v.put("small", r.nextInt(65536) - 32768);
    if (r.nextInt(3) == 0) {
      v.put("tags", null);
    } else {
      List<String> tags = new ArrayList<>();
      for (int t = r.nextInt(4); t > 0; t--) {
        tags.add(text(r));
      }
      v.put("tags", tags);
    }
    byte[] blob = new byte[r.nextInt(6)];
    r.nextBytes(blob);
    v.put("blob", r.nextInt(4) == 0 ? null : ByteBuffer.wrap(blob));
    if (r.nextInt(3) == 0) {
      v.put("attrs", null);
    } else { // a name twice (JSON refuses it) now and then
      Map<String, Long> attrs = new java.util.LinkedHashMap<>();
      for (int t = r.nextInt(3); t > 0; t--) {
        attrs.put(text(r), r.nextLong());
      }
      v.put("attrs", attrs);
    }
    Schema kind = row.getField("kind").schema().getTypes().get(1);
    v.put("kind", r.nextInt(3) == 0 ? null : new GenericData.EnumSymbol(kind, r.nextBoolean() ? "SMALL" : "LARGE"));
    Schema raw = row.getField("raw").schema().getTypes().get(1);
    byte[] four = new byte[4];
    r.nextBytes(four);
    v.put("raw", r.nextInt(3) == 0 ? null : new GenericData.Fixed(raw, four));
    v.put("doc", r.nextInt(3) == 0 ? null : "{\"a\": [1, 2.50, \"x\\u0000y\"], \"b\": {\"c\": null}}");
    return v;
  }

  @SafeVarargs
  private static <T> T pick(Random r, T usual, T... edges) {
    return r.nextInt(40) == 0 ? edges[r.nextInt(edges.length)] : usual;
  }

  private static long moment(Random r) {
    return pick(r, 1_700_000_000_000_000L + r.nextInt(1_000_000_000) * 997L, 0L, -1L, -62_135_596_800_000_000L, -62_135_596_800_000_001L, 253_402_300_799_999_999L, 253_402_300_800_000_000L, Long.MIN_VALUE, Long.MAX_VALUE);
  }

  private static byte[] decimal(Random r) {
    byte[] b = new byte[pick(r, 1 + r.nextInt(8), 0, 1, 16, 40)];
    r.nextBytes(b);
    return b;
  }

  private static final String[] PIECES = {
    "a", "Zürich", "東京", "\"", "\\", "\n", "\u0000", "\u001f", "\u007f", "\u2028", "😀", " ", "'", "/", "é"
  };

  private static String text(Random r) {
    StringBuilder s = new StringBuilder();
    for (int k = r.nextInt(6); k > 0; k--) {
      s.append(PIECES[r.nextInt(PIECES.length)]);
    }
    return s.toString();
  }
}
