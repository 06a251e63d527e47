// Kafka Connect's own JsonConverter (schemas.enable) reads records a test hands it, as a sink
// connector would: stdin holds one "<key hex> <value hex>" line per record; each prints as
// "<key struct>\t<value schema name>\t<value struct>", or "ERROR <what the converter said>".
// Run as a single-file program: java -cp <the broker's jars> ConnectRead.java
import java.io.BufferedReader;
import java.io.InputStreamReader;
import java.util.HexFormat;
import java.util.Map;
import org.apache.kafka.connect.data.SchemaAndValue;
import org.apache.kafka.connect.json.JsonConverter;

public class ConnectRead {
  public static void main(String[] args) throws Exception {
    JsonConverter keys = new JsonConverter();
    keys.configure(Map.of("schemas.enable", "true"), true);
    JsonConverter values = new JsonConverter();
    values.configure(Map.of("schemas.enable", "true"), false);
    BufferedReader in = new BufferedReader(new InputStreamReader(System.in));
    for (String line = in.readLine(); line != null; line = in.readLine()) {
      String[] parts = line.split(" ");
      try {
        SchemaAndValue key = keys.toConnectData("t", HexFormat.of().parseHex(parts[0]));
        SchemaAndValue value = values.toConnectData("t", HexFormat.of().parseHex(parts[1]));
        System.out.println(key.value() + "\t" + value.schema().name() + "\t" + value.value());
      } catch (RuntimeException e) {
        System.out.println("ERROR " + e.getMessage());
      }
    }
  }
}
