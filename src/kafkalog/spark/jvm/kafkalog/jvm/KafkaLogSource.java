package kafkalog.jvm;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.node.ObjectNode;
import java.util.EnumSet;
import java.util.HashMap;
import java.util.Map;
import java.util.Set;
import org.apache.spark.sql.Dataset;
import org.apache.spark.sql.Row;
import org.apache.spark.sql.SQLContext;
import org.apache.spark.sql.SaveMode;
import org.apache.spark.sql.connector.catalog.SupportsRead;
import org.apache.spark.sql.connector.catalog.Table;
import org.apache.spark.sql.connector.catalog.TableCapability;
import org.apache.spark.sql.connector.catalog.TableProvider;
import org.apache.spark.sql.connector.expressions.Transform;
import org.apache.spark.sql.connector.read.ScanBuilder;
import org.apache.spark.sql.sources.BaseRelation;
import org.apache.spark.sql.sources.CreatableRelationProvider;
import org.apache.spark.sql.sources.DataSourceRegister;
import org.apache.spark.sql.types.StructType;
import org.apache.spark.sql.util.CaseInsensitiveStringMap;

/**
 * {@code format("kafkalog")} in the JVM: batch reads and streams decoded here, planned by
 * kafkalog's Python planner; writes handed to the Python source ({@code kafkalog_python}).
 */
public final class KafkaLogSource implements TableProvider, DataSourceRegister, CreatableRelationProvider {
  static final String PYTHON_NAME = "kafkalog_python";
  /** schemas parsed from the planner's DDL (a handful: the columns, with or without headers,
   * or the {@code columns} option's), parsed once: Spark's parser costs ~1 ms a load() */
  private static final java.util.concurrent.ConcurrentHashMap<String, StructType> SCHEMAS =
      new java.util.concurrent.ConcurrentHashMap<>();

  @Override
  public String shortName() {
    return "kafkalog";
  }

  @Override
  public boolean supportsExternalMetadata() {
    return true;
  }

  @Override
  public StructType inferSchema(CaseInsensitiveStringMap options) {
    Map<String, String> given = options.asCaseSensitiveMap();
    // the schema depends on the options and the path's listing (check_at_load), not on what
    // the partitions hold: an append or a roll leaves it kept
    JsonNode answer = KeptAnswers.ask(Bridge.request("schema", given), given, KeptAnswers.Reach.LISTING);
    return SCHEMAS.computeIfAbsent(answer.get("ddl").asText(), StructType::fromDDL);
  }

  @Override
  public Table getTable(StructType schema, Transform[] partitioning, Map<String, String> properties) {
    return new KafkaLogTable(schema, new HashMap<>(properties));
  }

  /** Writes: the Python source's writer, through Spark's public DataFrameWriter. */
  @Override
  public BaseRelation createRelation(
      SQLContext sqlContext, SaveMode mode, scala.collection.immutable.Map<String, String> parameters, Dataset<Row> data) {
    data.write().format(PYTHON_NAME).mode(mode).options(parameters).save();
    StructType schema = data.schema();
    return new BaseRelation() {
      @Override
      public SQLContext sqlContext() {
        return sqlContext;
      }

      @Override
      public StructType schema() {
        return schema;
      }
    };
  }

  static final class KafkaLogTable implements Table, SupportsRead {
    private final StructType schema;
    private final Map<String, String> properties;

    KafkaLogTable(StructType schema, Map<String, String> properties) {
      this.schema = schema;
      this.properties = properties;
    }

    @Override
    public String name() {
      return "kafkalog";
    }

    @Override
    @SuppressWarnings("deprecation")
    public StructType schema() {
      return schema;
    }

    @Override
    public Set<TableCapability> capabilities() {
      return EnumSet.of(TableCapability.BATCH_READ, TableCapability.MICRO_BATCH_READ);
    }

    @Override
    public ScanBuilder newScanBuilder(CaseInsensitiveStringMap options) {
      Map<String, String> all = new HashMap<>(properties);
      all.putAll(options.asCaseSensitiveMap());
      // the columns of a schema the user gave, checked as the Python source checks them
      ObjectNode req = Bridge.request("columns", all);
      req.put("schema", schema.json());
      JsonNode fields = KeptAnswers.ask(req, all, KeptAnswers.Reach.OPTIONS).get("fields");
      Map<String, String> sources = new HashMap<>();
      for (JsonNode f : fields) sources.put(f.get(0).asText(), f.get(1).asText());
      return new KafkaLogScan.Builder(all, schema, sources);
    }
  }
}
