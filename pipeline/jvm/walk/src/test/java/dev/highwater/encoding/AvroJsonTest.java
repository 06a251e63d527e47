package dev.highwater.encoding;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertNull;
import static org.junit.jupiter.api.Assertions.assertTrue;

import com.fasterxml.jackson.databind.ObjectMapper;
import java.io.ByteArrayOutputStream;
import java.nio.charset.StandardCharsets;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.params.ParameterizedTest;
import org.junit.jupiter.params.provider.ValueSource;

/** Avro binary read as JSON (against the Python loop, on Spark with a real registry). */
class AvroJsonTest {
  private static final ObjectMapper JSON = new ObjectMapper();

  /** Doubles (their bits) and the text orjson writes for them (made by orjson 3.13). */
  @ParameterizedTest
  @ValueSource(
      strings = {
        "4607182418800017408L=1.0",
        "4846369599423283200L=1e+16",
        "4848869599423283200L=1.5e+16",
        "4532020583610935537L=0.00001",
        "4517329193108106637L=1e-6",
        "4547007122018943789L=0.0001",
        "4817745636528479808L=123456789012345.0",
        "4936209963552724370L=1e+22",
        "4868223978707957653L=2.82879384806159e+17",
        "4591870180066957722L=0.1",
        "-9223372036854775808L=-0.0",
        "0L=0.0",
        "1L=5e-324",
        "9218868437227405311L=1.7976931348623157e+308",
        "4831355200913801216L=1000000000000000.0",
        "4846369599423283199L=9999999999999998.0",
        "4847542438873900484L=1.2345678901234568e+16",
        "4548482861544840553L=0.00012",
        "-4719553642628780659L=-1.25e-7",
        "4503599627370496L=2.2250738585072014e-308",
        "4636737291354636288L=100.0",
        "4653144203864309760L=1234.5",
        "4599075939470750515L=0.3",
        "4604180019048437077L=0.6666666666666666",
        "4547007122018943789L=0.0001",
        "4532020583610935536L=9.999999999999999e-6",
        "4950912855330343670L=1e+23",
        "4934958393344299186L=8.41e+21",
        "4526749599430098723L=4.35e-6",
        "6586817703467044660L=2.2249990996533952e+132",
        "510466653875831171L=1.5554900548208567e-274",
        "4230064219156134398L=6.529238237491192e-26",
        "551718759535842119L=8.909412163198397e-272",
        "7176805392361912821L=6.0708714438749044e+171",
        "-837994138457820126L=-3.533669760477968e+252",
        "1191087575916819741L=4.862938211365244e-229",
        "-821026753935825416L=-4.972084079656132e+253",
        "6292810019819884344L=4.942622746550164e+112",
        "-7672947022219751716L=-5.037459561236451e-205",
        "-3273654990283123131L=-5.614942094302995e+89",
        "1779994104946655436L=1.1115120307410538e-189",
        "6402400916308486309L=1.0448958145898891e+120",
        "27082966879392341L=7.21726153608979e-307",
        "2858346926900817010L=1.3328272185502275e-117",
        "-8783499912870467179L=-2.9461900242533533e-279",
        "-3666695416530959149L=-3.0113800606756627e+63",
        "6810592820499118921L=2.0065375084611526e+147",
        "-4799516748345383798L=-5.880791752944531e-13",
        "-5442705189321751082L=-6.022352407627976e-56",
        "1101844898132161968L=5.216811860116211e-235",
        "7134079014400641203L=8.18011077974814e+168",
        "3075988369462410689L=4.494361488235644e-103",
        "-2332834999239501994L=-4.217485643155111e+152",
        "5718614692385920825L=2.0213183743828768e+74",
        "4708432842198089728L=6216421.0",
        "4915143040412155904L=4.0759765095646914e+20",
        "4758918979634855936L=14536614912.0",
        "4525885953897660416L=3.7165805224503856e-6",
        "4510236650533552128L=3.513610806749057e-7",
        "5080040440825118720L=4.0475022615274005e+31",
        "-5106800416025214976L=-1.6370700237589133e-33",
        "4448440045824638976L=2.5496592684359776e-11",
        "-4940831976396423168L=-2.0274959673724493e-22",
        "4337592382712184832L=9.879136962933864e-19"
      })
  void writes_doubles_as_orjson_does(String vector) {
    String[] parts = vector.split("L=", 2);
    double d = Double.longBitsToDouble(Long.parseLong(parts[0]));
    assertEquals(parts[1], AvroJson.number(d), vector);
  }

  @Test
  void leaves_nan_and_infinities() {
    assertNull(AvroJson.number(Double.NaN));
    assertNull(AvroJson.number(Double.POSITIVE_INFINITY));
  }

  private static AvroJson.Node schema(String json) throws Exception {
    return AvroJson.parse(JSON.readTree(json));
  }

  private static String read(AvroJson.Node node, byte[] avro) {
    Encoding.Buffer out = new Encoding.Buffer();
    int[] at = {0};
    if (!AvroJson.read(node, avro, at, out, 0) || at[0] != avro.length) {
      return null;
    }
    return new String(out.bytes, 0, out.size, StandardCharsets.UTF_8);
  }

  private static byte[] bytes(int... values) {
    ByteArrayOutputStream out = new ByteArrayOutputStream();
    for (int v : values) {
      out.write(v);
    }
    return out.toByteArray();
  }

  private static final String EVERY_TYPE =
      "{\"type\":\"record\",\"name\":\"R\",\"namespace\":\"n\",\"fields\":["
          + "{\"name\":\"i\",\"type\":\"int\"},"
          + "{\"name\":\"o\",\"type\":[\"null\",\"long\"]},"
          + "{\"name\":\"s\",\"type\":\"string\"},"
          + "{\"name\":\"b\",\"type\":{\"type\":\"bytes\",\"logicalType\":\"decimal\"}},"
          + "{\"name\":\"e\",\"type\":{\"type\":\"enum\",\"name\":\"E\",\"symbols\":[\"A\",\"B\"]}},"
          + "{\"name\":\"a\",\"type\":{\"type\":\"array\",\"items\":\"n.E\"}},"
          + "{\"name\":\"m\",\"type\":{\"type\":\"map\",\"values\":\"boolean\"}},"
          + "{\"name\":\"f\",\"type\":{\"type\":\"fixed\",\"name\":\"F\",\"size\":2}},"
          + "{\"name\":\"g\",\"type\":\"float\"},"
          + "{\"name\":\"d\",\"type\":\"double\"}]}";
  private static final byte[] EVERY_VALUE =
      bytes(
          0x03, 0x02, 0x80, 0x01, 0x08, '"', 'q', 0xc3, 0xa9, 0x04, 0x00, 0xff, 0x02,
          0x03, 0x04, 0x00, 0x02, 0x00, 0x02, 0x02, 'k', 0x01, 0x00, 0x61, 0x62,
          0, 0, 0xc0, 0x3f, 0, 0, 0, 0, 0, 0, 0xf8, 0x3f);

  @Test
  void reads_a_record_of_every_type() throws Exception {
    // EVERY_VALUE: i = -2; o: branch 1, 64; s = "qé (4 bytes); b = 00 ff; e = B; a: a block
    // of -2 items (size 0), A, B, end; m: {"k": true}; f = ab; g = 1.5f; d = 1.5
    assertEquals(
        "{\"i\":-2,\"o\":64,\"s\":\"\\\"q\u00e9\",\"b\":\"AP8=\",\"e\":\"B\",\"a\":[\"A\",\"B\"],"
            + "\"m\":{\"k\":true},\"f\":\"YWI=\",\"g\":1.5,\"d\":1.5}",
        read(schema(EVERY_TYPE), EVERY_VALUE));
  }

  /** Where {@link AvroJson#skip} ends and whether it takes, against {@link AvroJson#read}'s. */
  private static void skipsAsItReads(AvroJson.Node node, byte[] avro, String what) {
    int[] read = {0};
    boolean taken = AvroJson.read(node, avro, read, new Encoding.Buffer(), 0);
    int[] skipped = {0};
    assertEquals(taken, AvroJson.skip(node, avro, skipped, 0), what);
    if (taken) {
      assertEquals(read[0], skipped[0], what);
    }
  }

  /**
   * Every byte of a datum of every type changed to each of a few values, and every prefix of
   * it: skipping takes it exactly where reading does, and ends where reading ends.
   */
  @Test
  void skips_what_it_reads_and_leaves_what_it_leaves() throws Exception {
    AvroJson.Node node = schema(EVERY_TYPE);
    skipsAsItReads(node, EVERY_VALUE, "as written");
    int[] values = {0x00, 0x01, 0x02, 0x03, 0x04, 0x7f, 0x80, 0xc3, 0xed, 0xf8, 0xff};
    int taken = 0;
    for (int i = 0; i < EVERY_VALUE.length; i++) {
      skipsAsItReads(node, java.util.Arrays.copyOf(EVERY_VALUE, i), "the first " + i);
      for (int v : values) {
        byte[] changed = EVERY_VALUE.clone();
        changed[i] = (byte) v;
        skipsAsItReads(node, changed, "byte " + i + " = " + v);
        taken += AvroJson.read(node, changed, new int[] {0}, new Encoding.Buffer(), 0) ? 1 : 0;
      }
    }
    assertTrue(taken > 0 && taken < EVERY_VALUE.length * values.length, "both kinds met");
    // nesting: a list of 40 links is deeper than MAX_DEPTH (a record and a union per link)
    AvroJson.Node list =
        schema(
            "{\"type\":\"record\",\"name\":\"L\",\"fields\":[{\"name\":\"v\",\"type\":\"int\"},"
                + "{\"name\":\"next\",\"type\":[\"null\",\"L\"]}]}");
    for (int links : new int[] {3, 31, 32, 40}) {
      ByteArrayOutputStream out = new ByteArrayOutputStream();
      for (int k = 0; k < links; k++) {
        out.write(0x02); // v = 1
        out.write(k + 1 < links ? 0x02 : 0x00); // next: another link, or null
      }
      skipsAsItReads(list, out.toByteArray(), links + " links");
    }
  }

  @Test
  void leaves_what_it_cannot_read_exactly() throws Exception {
    AvroJson.Node text = schema("\"string\"");
    assertNull(read(text, bytes(0x02, 0xff)), "not UTF-8");
    assertNull(read(text, bytes(0x04, 'a')), "runs out");
    assertNull(read(text, bytes(0x02, 'a', 'b')), "bytes left over");
    assertEquals("\"\\u0001\"", read(text, bytes(0x02, 0x01)));
    AvroJson.Node number = schema("\"double\"");
    assertNull(read(number, bytes(0, 0, 0, 0, 0, 0, 0xf8, 0x7f)), "NaN");
    AvroJson.Node union = schema("[\"null\",\"int\"]");
    assertNull(read(union, bytes(0x04)), "no such branch");
    assertNull(read(schema("\"boolean\""), bytes(0x02)), "not 0 or 1");
    assertNull(read(schema("\"int\""), bytes(0xff, 0xff, 0xff, 0xff, 0x1f)), "beyond an int");
  }

  @Test
  void a_schema_given_as_its_type_is_that_schema() throws Exception {
    AvroJson.Node node = schema("{\"type\":{\"type\":\"array\",\"items\":\"int\"}}");
    assertEquals("[1]", read(node, bytes(0x02, 0x02, 0x00)));
  }

  @Test
  void a_name_is_looked_up_in_its_namespace() throws Exception {
    AvroJson.Node node =
        schema(
            "{\"type\":\"record\",\"name\":\"Envelope\",\"namespace\":\"a.b\",\"fields\":["
                + "{\"name\":\"before\",\"type\":[\"null\",{\"type\":\"record\",\"name\":\"Value\","
                + "\"fields\":[{\"name\":\"x\",\"type\":\"int\"}]}]},"
                + "{\"name\":\"after\",\"type\":[\"null\",\"Value\"]}]}");
    assertEquals("{\"before\":null,\"after\":{\"x\":1}}", read(node, bytes(0x00, 0x02, 0x02)));
    assertTrue(Registry.connect(JSON.readTree(
        "{\"type\":\"record\",\"name\":\"E\",\"fields\":[{\"name\":\"after\",\"type\":"
            + "[\"null\",{\"type\":\"record\",\"name\":\"V\",\"fields\":[{\"name\":\"d\","
            + "\"type\":{\"type\":\"bytes\",\"connect.name\":\"org.apache.kafka.connect.data.Decimal\","
            + "\"connect.parameters\":{\"scale\":\"2\"}}},{\"name\":\"n\",\"type\":\"int\"}]}]}]}"))
        .toString()
        .equals(
            "{\"fields\":[{\"field\":\"after\",\"fields\":[{\"field\":\"d\","
                + "\"name\":\"org.apache.kafka.connect.data.Decimal\",\"parameters\":{\"scale\":\"2\"}},"
                + "{\"field\":\"n\"}]}]}"));
    assertFalse(AvroJson.read(node, bytes(0x04), new int[] {0}, new Encoding.Buffer(), 0));
    // a column's type an object without a semantic type (connect.type), and Connect's own
    // logical type without connect.name: read as wire.py's connect_column reads them
    assertEquals(
        "{\"fields\":[{\"field\":\"after\",\"fields\":[{\"field\":\"s\"},{\"field\":\"d\","
            + "\"name\":\"org.apache.kafka.connect.data.Decimal\","
            + "\"parameters\":{\"scale\":\"2\",\"connect.decimal.precision\":\"9\"}}]}]}",
        Registry.connect(JSON.readTree(
                "{\"type\":\"record\",\"name\":\"E\",\"fields\":[{\"name\":\"after\",\"type\":"
                    + "[\"null\",{\"type\":\"record\",\"name\":\"V\",\"fields\":["
                    + "{\"name\":\"s\",\"type\":{\"type\":\"int\",\"connect.type\":\"int16\"}},"
                    + "{\"name\":\"d\",\"type\":[\"null\",{\"type\":\"bytes\","
                    + "\"logicalType\":\"decimal\",\"precision\":9,\"scale\":2}]}]}]}]}"))
            .toString());
  }
}
