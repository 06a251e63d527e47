package dev.highwater.encoding;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;
import com.fasterxml.jackson.databind.node.ArrayNode;
import com.fasterxml.jackson.databind.node.ObjectNode;
import java.io.IOException;
import java.io.Serializable;
import java.net.URI;
import java.net.http.HttpClient;
import java.net.http.HttpRequest;
import java.net.http.HttpResponse;
import java.nio.charset.StandardCharsets;
import java.time.Duration;
import java.util.Base64;
import java.util.HashMap;
import java.util.Map;
import java.util.concurrent.ConcurrentHashMap;

/**
 * A schema registry's writer schemas by id (Confluent's API, which Apicurio speaks too), as
 * pipeline/core/sources/wire.py reads them: fetched once per id and executor, each kept as its
 * {@link AvroJson} reading and its Connect-style schema ({@link #connect}, as {@code
 * connect_schema} writes it). A schema that cannot be fetched or read is null: the Python loop
 * decides (it names the record, or the registry that did not answer).
 */
final class Registry implements Serializable {
  private static final long serialVersionUID = 1L;
  private static final ObjectMapper JSON = new ObjectMapper();
  private static final Map<String, Schema> SCHEMAS = new ConcurrentHashMap<>(); // per executor
  private static final HttpClient HTTP =
      HttpClient.newBuilder().connectTimeout(Duration.ofSeconds(10)).build();

  /** A writer schema as the walk reads by it. */
  static final class Schema {
    final AvroJson.Node node;
    // an envelope's {after, before} columns by the Connect-style schema; null: not told apart
    final Connect.Column[][] typed;
    final boolean enveloped; // a record of exactly the fields schema and payload
    final AvroEvent event; // a value's read straight into the envelope; null: through JSON
    final boolean keyable; // a key's read straight into its JSON array (AvroEvent.key)

    Schema(AvroJson.Node node, JsonNode connect) {
      this.node = node;
      Connect.Column[] after = Connect.columns(connect, "after");
      Connect.Column[] before = Connect.columns(connect, "before");
      this.typed = after == null || before == null ? null : new Connect.Column[][] {after, before};
      this.enveloped = node.type == AvroJson.Type.RECORD && names(node).equals(ENVELOPE);
      this.event = enveloped ? null : AvroEvent.of(node, typed);
      this.keyable = !enveloped && AvroEvent.keyable(node);
    }
  }

  private static final java.util.Set<String> ENVELOPE = java.util.Set.of("schema", "payload");

  private static java.util.Set<String> names(AvroJson.Node record) {
    java.util.Set<String> names = new java.util.HashSet<>();
    for (byte[] quoted : record.names) {
      names.add(new String(quoted, 1, quoted.length - 2, StandardCharsets.UTF_8));
    }
    return names;
  }

  private final String url;
  private final String userInfo; // basic.auth.user.info, or null

  Registry(String url, String userInfo) {
    this.url = url.endsWith("/") ? url.substring(0, url.length() - 1) : url;
    this.userInfo = userInfo;
  }

  /** The registry of a walk plan's route ({@code {"url": …, "basic.auth.user.info": …}}). */
  static Registry of(JsonNode config) {
    JsonNode user = config.path("basic.auth.user.info");
    return new Registry(config.get("url").asText(), user.isTextual() ? user.textValue() : null);
  }

  /** The schema of {@code id}, or null (not fetched, not read: the Python loop decides). */
  Schema schema(long id) {
    String key = url + "#" + id;
    Schema found = SCHEMAS.get(key);
    if (found == null) {
      found = fetch(id);
      if (found != null) {
        SCHEMAS.put(key, found);
      }
    }
    return found;
  }

  private Schema fetch(long id) {
    HttpRequest.Builder request =
        HttpRequest.newBuilder(URI.create(url + "/schemas/ids/" + id))
            .timeout(Duration.ofSeconds(30))
            .header("Accept", "application/json");
    if (userInfo != null) {
      String basic = Base64.getEncoder().encodeToString(userInfo.getBytes(StandardCharsets.UTF_8));
      request.header("Authorization", "Basic " + basic);
    }
    try {
      HttpResponse<String> answer = HTTP.send(request.build(), HttpResponse.BodyHandlers.ofString());
      if (answer.statusCode() != 200) {
        return null;
      }
      JsonNode writer = JSON.readTree(JSON.readTree(answer.body()).path("schema").asText());
      return new Schema(AvroJson.parse(writer), connect(writer));
    } catch (IOException | IllegalArgumentException e) {
      return null;
    } catch (InterruptedException e) {
      Thread.currentThread().interrupt();
      return null;
    }
  }

  /**
   * The Connect-style schema of an envelope (wire.py's {@code connect_schema}): each record
   * field's columns, with the semantic type and parameters of those that have one (what the
   * walk reads values by); a record defined once and named again is looked up by its name.
   */
  static ObjectNode connect(JsonNode writer) {
    Map<String, JsonNode> named = new HashMap<>();
    collect(writer, null, named);
    ObjectNode out = JSON.createObjectNode();
    ArrayNode fields = out.putArray("fields");
    for (JsonNode field : nonNull(writer).path("fields")) {
      JsonNode inner = resolve(nonNull(field.get("type")), named);
      ObjectNode entry = fields.addObject().put("field", field.path("name").asText());
      if (inner.isObject() && "record".equals(inner.path("type").asText())) {
        ArrayNode columns = entry.putArray("fields");
        for (JsonNode column : inner.path("fields")) {
          ObjectNode c = columns.addObject().put("field", column.path("name").asText());
          semantic(column.get("type"), named, c);
        }
      }
    }
    return out;
  }

  /** Connect's own logical types, for a writer that left out {@code connect.name}. */
  private static final Map<String, String> LOGICAL =
      Map.of(
          "decimal", "org.apache.kafka.connect.data.Decimal",
          "date", "org.apache.kafka.connect.data.Date",
          "time-millis", "org.apache.kafka.connect.data.Time",
          "timestamp-millis", "org.apache.kafka.connect.data.Timestamp");

  /**
   * A column's semantic type and parameters, as wire.py's {@code connect_column} says them:
   * {@code connect.name} (or Connect's own logical type), {@code connect.parameters}, a
   * decimal's scale and precision from its logical type when the parameters lack them.
   */
  private static void semantic(JsonNode avro, Map<String, JsonNode> named, ObjectNode c) {
    JsonNode kind = resolve(nonNull(avro), named);
    if (!kind.isObject()) {
      return;
    }
    JsonNode base = kind.path("type");
    if (base.isObject() || base.isArray()) { // {"type": {"type": "long", ...}}: the inner one
      semantic(base, named, c);
      return;
    }
    String logical = kind.path("logicalType").asText(null);
    // (Map.of's get refuses a null key: a column without a logical type has none)
    String name = kind.hasNonNull("connect.name") || logical == null ? null : LOGICAL.get(logical);
    if ("record".equals(base.asText()) && name != null) {
      name = null; // logical types are not records'
    }
    if (!kind.hasNonNull("connect.name") && name == null) {
      return;
    }
    if (name == null) {
      c.set("name", kind.get("connect.name"));
    } else {
      c.put("name", name);
    }
    JsonNode parameters = kind.path("connect.parameters");
    boolean given = !parameters.isMissingNode() && !parameters.isNull() && truthy(parameters);
    ObjectNode p = given && parameters.isObject() ? parameters.deepCopy() : JSON.createObjectNode();
    if ("decimal".equals(logical)) {
      if (!p.has("scale")) {
        p.put("scale", kind.has("scale") ? kind.get("scale").asText() : "0");
      }
      if (kind.has("precision") && !p.has("connect.decimal.precision")) {
        p.put("connect.decimal.precision", kind.get("precision").asText());
      }
    }
    c.set("parameters", given && !parameters.isObject() ? parameters : p);
  }

  /** Python's truth of a JSON value ({@code x or {}}). */
  private static boolean truthy(JsonNode v) {
    return !(v.isBoolean() && !v.booleanValue())
        && !(v.isNumber() && v.asDouble() == 0)
        && !(v.isTextual() && v.textValue().isEmpty())
        && !(v.isContainerNode() && v.size() == 0);
  }

  private static JsonNode resolve(JsonNode kind, Map<String, JsonNode> named) {
    return kind.isTextual() && named.containsKey(kind.textValue()) ? named.get(kind.textValue()) : kind;
  }

  /** The non-null branch of an optional type (schemas/connect.py's {@code non_null}). */
  private static JsonNode nonNull(JsonNode avro) {
    if (avro == null) {
      return com.fasterxml.jackson.databind.node.MissingNode.getInstance();
    }
    if (!avro.isArray()) {
      return avro;
    }
    JsonNode only = null;
    int count = 0;
    for (JsonNode branch : avro) {
      if (!"null".equals(branch.textValue())) {
        only = branch;
        count++;
      }
    }
    return count == 1 ? only : avro;
  }

  /** Every named type in {@code schema} by its name and its full name (wire.py's). */
  private static void collect(JsonNode schema, String namespace, Map<String, JsonNode> named) {
    if (schema == null) {
      return;
    }
    if (schema.isArray()) {
      for (JsonNode branch : schema) {
        collect(branch, namespace, named);
      }
      return;
    }
    if (!schema.isObject()) {
      return;
    }
    String type = schema.path("type").asText();
    if (schema.has("name") && (type.equals("record") || type.equals("enum") || type.equals("fixed"))) {
      String name = schema.get("name").asText();
      if (schema.has("namespace")) { // Python's schema.get("namespace", namespace)
        namespace = schema.get("namespace").isNull() ? null : schema.get("namespace").asText();
      }
      named.put(name, schema);
      if (namespace != null && !namespace.isEmpty() && !name.contains(".")) {
        named.put(namespace + "." + name, schema);
      }
    }
    for (JsonNode field : schema.path("fields")) {
      collect(field.get("type"), namespace, named);
    }
    for (String key : new String[] {"items", "values"}) {
      if (schema.has(key)) {
        collect(schema.get(key), namespace, named);
      }
    }
  }
}
