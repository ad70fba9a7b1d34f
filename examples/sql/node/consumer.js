// A kafkajs consumer that writes each batch's rows and its offsets in one PostgreSQL
// transaction through offsetstore's SQL API v1 (docs/sql.md): exactly once, fenced.
//
//   node consumer.js --bootstrap localhost:9092 --database-url postgresql://app@db/app \
//       --group orders-etl --topic orders --table orders_copy [--batch 50] [--hold 0]
//       [--on-fenced exit|rejoin] [--generation N] [--kafka-group ID] [--until-end]
//
// Kafka's group only spreads partitions over the consumers (autoCommit is off: Kafka keeps
// no offsets of ours); the offsets live in PostgreSQL, committed with the rows. On each
// assignment, and after a rejoin, every partition is sought to begin_write's next offset.
//
// Output lines (a test reads them): `joined G`, `wrote N` (after a COMMIT), `skipped N`, `fenced <DETAIL>`, `rejoined G`,
// `done`. Exit 0 at the log end with --until-end, 3 when fenced with --on-fenced exit.
"use strict";

const os = require("os");
const { Kafka, logLevel } = require("kafkajs");
const { Client } = require("pg");

function parseArgs(argv) {
  const args = { batch: 50, hold: 0, onFenced: "exit", generation: null, kafkaGroup: null, untilEnd: false };
  for (let i = 0; i < argv.length; i++) {
    const key = argv[i];
    const next = () => argv[++i];
    switch (key) {
      case "--bootstrap": args.bootstrap = next(); break;
      case "--database-url": args.databaseUrl = next(); break;
      case "--group": args.group = next(); break;
      case "--topic": args.topic = next(); break;
      case "--table": args.table = next(); break;
      case "--batch": args.batch = Number(next()); break;
      case "--hold": args.hold = Number(next()); break;
      case "--on-fenced": args.onFenced = next(); break;
      case "--generation": args.generation = Number(next()); break;
      case "--kafka-group": args.kafkaGroup = next(); break;
      case "--until-end": args.untilEnd = true; break;
      default: throw new Error(`unknown argument ${key}`);
    }
  }
  for (const required of ["bootstrap", "databaseUrl", "group", "topic", "table"]) {
    if (!args[required]) throw new Error(`--${required.replace(/[A-Z]/g, (c) => "-" + c.toLowerCase())} is required`);
  }
  return args;
}

const STALE_GENERATION = "OS001";
const sleep = (seconds) => new Promise((resolve) => setTimeout(resolve, seconds * 1000));

class Fenced extends Error {
  constructor(cause) {
    super(cause.detail);
    this.cause = cause;
  }
}

async function main() {
  const args = parseArgs(process.argv.slice(2));
  const db = new Client({ connectionString: args.databaseUrl });
  await db.connect();
  const member = `node-${process.pid}`;
  // One connection, one transaction at a time: the batch loop, the assignment handler and
  // the end-of-log timer take turns.
  let queue = Promise.resolve();
  const exclusive = (fn) => {
    const run = queue.then(fn);
    queue = run.catch(() => {});
    return run;
  };

  // A zombie keeps the generation it was given; everyone else joins.
  let generation = args.generation;
  if (generation === null) {
    const joined = await db.query("SELECT offsetstore.join_group($1, $2, $3) AS g", [args.group, member, os.hostname()]);
    generation = Number(joined.rows[0].g);
  }
  console.log(`joined ${generation}`);

  // begin_write in the caller's transaction: locks the group, fences, returns stored next offsets.
  async function beginWrite() {
    try {
      const { rows } = await db.query("SELECT topic, partition, next_offset FROM offsetstore.begin_write($1, $2)", [
        args.group,
        generation,
      ]);
      return new Map(rows.map((r) => [`${r.topic}:${r.partition}`, Number(r.next_offset)]));
    } catch (e) {
      throw e.code === STALE_GENERATION ? new Fenced(e) : e;
    }
  }

  const kafka = new Kafka({ clientId: member, brokers: [args.bootstrap], logLevel: logLevel.ERROR });
  const admin = kafka.admin();
  await admin.connect();
  const consumer = kafka.consumer({
    groupId: args.kafkaGroup || args.group,
    sessionTimeout: 10000,
    heartbeatInterval: 1000,
  });
  let assigned = [];

  // The stored next offset of each assigned partition, as a position kafkajs can seek to:
  // the sentinels an operator's reset may leave (-2 earliest, -1 latest) become the log's ends.
  async function seekToStored() {
    const stored = await exclusive(async () => {
      await db.query("BEGIN");
      try {
        return await beginWrite();
      } finally {
        await db.query("ROLLBACK"); // nothing to write: only the offsets, read under the fence
      }
    });
    const ends = new Map((await admin.fetchTopicOffsets(args.topic)).map((o) => [o.partition, o]));
    for (const partition of assigned) {
      let offset = stored.get(`${args.topic}:${partition}`);
      if (offset === undefined || offset === -2) offset = Number(ends.get(partition).low);
      else if (offset === -1) offset = Number(ends.get(partition).high);
      consumer.seek({ topic: args.topic, partition, offset: String(offset) });
    }
  }

  async function rejoin(fenced) {
    console.log(`fenced ${fenced.message}`);
    if (args.onFenced !== "rejoin" || args.generation !== null) {
      await shutdown(3);
    }
    const joined = await exclusive(() =>
      db.query("SELECT offsetstore.join_group($1, $2, $3) AS g", [args.group, member, os.hostname()]),
    );
    generation = Number(joined.rows[0].g);
    console.log(`rejoined ${generation}`);
    await seekToStored();
  }

  let stopping = false;
  async function shutdown(code) {
    stopping = true;
    // kafkajs may wait on a rebalance to leave the group: the exit does not.
    setTimeout(() => process.exit(code), 3000).unref();
    await consumer.disconnect().catch(() => {});
    await admin.disconnect().catch(() => {});
    await db.end().catch(() => {});
    process.exit(code);
  }

  async function atEnd() {
    const ends = await admin.fetchTopicOffsets(args.topic);
    const { rows } = await exclusive(() =>
      db.query("SELECT topic, partition, next_offset FROM offsetstore.read_offsets($1)", [args.group]),
    );
    const stored = new Map(rows.map((r) => [`${r.topic}:${r.partition}`, Number(r.next_offset)]));
    return ends.every((o) => Number(o.high) === 0 || stored.get(`${args.topic}:${o.partition}`) === Number(o.high));
  }

  // One transaction: begin_write, the rows not delivered before, commit_offsets, COMMIT.
  async function write(messages, partition) {
    await db.query("BEGIN");
    try {
      const stored = (await beginWrite()).get(`${args.topic}:${partition}`);
      if (stored >= 0 && Number(messages[0].offset) > stored) {
        // A gap: this fetch began past the stored offset (a reset moved it back, or a stale
        // batch outlived a seek). Writing it would skip the records between: seek instead.
        await db.query("ROLLBACK");
        return { gap: stored };
      }
      const fresh = messages.filter((m) => stored === undefined || Number(m.offset) >= stored);
      if (fresh.length > 0) {
        await db.query(
          `INSERT INTO ${args.table} (topic, "partition", "offset", value, run)
           SELECT $1::text, $2::integer, o, v, $5::bigint FROM unnest($3::bigint[], $4::text[]) AS u(o, v)`,
          [args.topic, partition, fresh.map((m) => m.offset), fresh.map((m) => m.value.toString()), generation],
        );
        // Each written record's offset + 1: the largest of a partition wins.
        await db.query("SELECT offsetstore.commit_offsets($1, $2, $3, $4, $5)", [
          args.group,
          generation,
          fresh.map(() => args.topic),
          fresh.map(() => partition),
          fresh.map((m) => String(Number(m.offset) + 1)),
        ]);
      }
      if (args.hold > 0) await sleep(args.hold);
      await db.query("COMMIT");
      return { written: fresh.length };
    } catch (e) {
      await db.query("ROLLBACK").catch(() => {});
      if (e.code === STALE_GENERATION) throw new Fenced(e);
      throw e;
    }
  }

  consumer.on(consumer.events.GROUP_JOIN, async (event) => {
    assigned = event.payload.memberAssignment[args.topic] || [];
    try {
      await seekToStored();
    } catch (e) {
      if (e instanceof Fenced) await rejoin(e);
      else throw e;
    }
  });

  await consumer.connect();
  await consumer.subscribe({ topics: [args.topic], fromBeginning: true });
  await consumer.run({
    autoCommit: false,
    eachBatchAutoResolve: false,
    eachBatch: async ({ batch, resolveOffset, heartbeat, isRunning, isStale }) => {
      for (let i = 0; i < batch.messages.length && !stopping; i += args.batch) {
        if (!isRunning() || isStale()) return;
        const chunk = batch.messages.slice(i, i + args.batch);
        try {
          const done = await exclusive(() => write(chunk, batch.partition));
          if (done.gap !== undefined) {
            consumer.seek({ topic: args.topic, partition: batch.partition, offset: String(done.gap) });
            return;
          }
          console.log(done.written > 0 ? `wrote ${done.written}` : `skipped ${chunk.length}`);
        } catch (e) {
          if (!(e instanceof Fenced)) throw e;
          await rejoin(e); // sought again: the rest of this batch is stale
          return;
        }
        resolveOffset(chunk[chunk.length - 1].offset);
        await heartbeat();
      }
    },
  });
  if (args.untilEnd) {
    // Checked on a timer, not after a batch: at the log end no batch comes.
    const check = async () => {
      if (!stopping && (await atEnd())) {
        console.log("done");
        await shutdown(0);
      }
      setTimeout(check, 500);
    };
    setTimeout(check, 500);
  }
}

main().catch((e) => {
  console.error(e);
  process.exit(1);
});
