#!/usr/bin/env node
// A Node.js consumer's commit loop against offsetstore: join, fetch, commit with the
// generation, compare-and-set, and the error reasons read from the rich status.
//
//   npm ci && node commit_loop.js --target 127.0.0.1:50051 --group node-orders-etl
//
// The service is loaded from the repository's .proto at run time (no generated code).
// Human-readable progress goes to stderr; one JSON summary line goes to stdout.
'use strict';

const path = require('node:path');
const { parseArgs } = require('node:util');
const grpc = require('@grpc/grpc-js');
const protoLoader = require('@grpc/proto-loader');
const protobuf = require('protobufjs');

const PROTO_DIR = process.env.OFFSETSTORE_PROTO_DIR || path.resolve(__dirname, '../../proto');
const RPC_PROTO_DIR = path.join(__dirname, 'protos');
const SERVICE = 'offsetstore.v1.OffsetStoreService';
const DOMAIN = 'offsetstore.v1';
// Names of this guide's own (docs/node.md): following the guides in order must not mix their offsets.
const TOPIC = 'node-orders';
const USAGE = `usage: node commit_loop.js [--target HOST:PORT] [--group GROUP]

Runs a commit loop against offsetstore on topic node-orders: join, fetch, commit with the
generation, a takeover that fences the first member, and a compare-and-set.

  --target HOST:PORT  the server (env OFFSETSTORE_SERVER, default 127.0.0.1:50051)
  --group GROUP       the consumer group (default node-example-<pid>)
  -h, --help          this help
`;

// --- the service, from the .proto ---------------------------------------------------

function loadService(protoDir = PROTO_DIR) {
  const definition = protoLoader.loadSync('offsetstore/v1/offset_store.proto', {
    includeDirs: [protoDir], // google/protobuf/timestamp.proto comes bundled with protobufjs
    keepCase: true, // without it snake_case fields (group_id, expected_offset) are silently dropped
    longs: Number, // int64 as Number: exact up to 2^53, far beyond any real offset
    enums: String,
    defaults: true, // absent scalars come back as 0 / "" instead of undefined
    oneofs: true,
  });
  return grpc.loadPackageDefinition(definition).offsetstore.v1.OffsetStoreService;
}

// Reads are retried on UNAVAILABLE by gRPC itself; writes never are, because a commit
// whose reply was lost may have landed (a repeated compare-and-set would then fail
// against its own write, a repeated JoinGroup would bump the generation twice).
const SERVICE_CONFIG = {
  methodConfig: [
    {
      name: ['FetchOffsets', 'ListGroups', 'DescribeGroup', 'ListOffsetHistory'].map((method) => ({
        service: SERVICE,
        method,
      })),
      retryPolicy: {
        maxAttempts: 4,
        initialBackoff: '0.1s',
        maxBackoff: '2s',
        backoffMultiplier: 2,
        retryableStatusCodes: ['UNAVAILABLE'],
      },
    },
  ],
};

// --- errors: google.rpc.Status from the grpc-status-details-bin trailer ------------

const rpcTypes = new protobuf.Root().loadSync(
  [path.join(RPC_PROTO_DIR, 'google/rpc/status.proto'), path.join(RPC_PROTO_DIR, 'google/rpc/error_details.proto')],
  { keepCase: true },
);
const Status = rpcTypes.lookupType('google.rpc.Status');

/** A failed call with offsetstore's ErrorInfo reason and metadata, and BadRequest's violations. */
class OffsetStoreError extends Error {
  constructor(error) {
    super(error.details || error.message);
    this.name = 'OffsetStoreError';
    this.code = error.code; // grpc.status.*
    this.codeName = grpc.status[error.code];
    this.reason = ''; // '' when the status had no offsetstore ErrorInfo (e.g. DEADLINE_EXCEEDED)
    this.metadata = {};
    this.violations = [];
    const raw = error.metadata && error.metadata.get('grpc-status-details-bin')[0];
    if (!raw) return;
    for (const any of Status.decode(raw).details) {
      const typeName = any.type_url.slice(any.type_url.lastIndexOf('/') + 1);
      if (typeName === 'google.rpc.ErrorInfo') {
        const info = rpcTypes.lookupType(typeName).decode(any.value);
        if (info.domain === DOMAIN) {
          this.reason = info.reason;
          this.metadata = { ...info.metadata };
        }
      } else if (typeName === 'google.rpc.BadRequest') {
        const bad = rpcTypes.lookupType(typeName).decode(any.value);
        this.violations = bad.field_violations.map((v) => ({ field: v.field, description: v.description }));
      }
    }
  }
}

/** A promise-returning client; every call has a deadline, every failure is an OffsetStoreError. */
class OffsetStoreClient {
  constructor(target, { credentials = grpc.credentials.createInsecure(), timeoutMs = 10000 } = {}) {
    const Service = loadService();
    this.stub = new Service(target, credentials, {
      'grpc.service_config': JSON.stringify(SERVICE_CONFIG),
    });
    this.timeoutMs = timeoutMs;
  }

  call(method, request) {
    return new Promise((resolve, reject) => {
      const deadline = new Date(Date.now() + this.timeoutMs);
      this.stub[method](request, { deadline }, (error, response) =>
        error ? reject(new OffsetStoreError(error)) : resolve(response),
      );
    });
  }

  joinGroup(group_id, member_id = '') {
    return this.call('JoinGroup', { group_id, member_id }).then((r) => r.generation);
  }

  /** offsets: [{topic, partition, offset, expected_offset?, metadata?}] */
  commitOffsets(group_id, offsets, generation = 0) {
    return this.call('CommitOffsets', { group_id, offsets, generation });
  }

  /** topics: [{topic, partitions: [..]}]; empty = every partition of the group. */
  fetchOffsets(group_id, topics = []) {
    return this.call('FetchOffsets', { group_id, topics });
  }

  close() {
    this.stub.close();
  }
}

// --- the commit loop -----------------------------------------------------------------

/**
 * Consumes batches and commits after each one, fenced by the group's generation.
 *
 * poll(positions) resolves to the next batch as [{topic, partition, offset}] ([] when
 * done), where positions maps "topic:partition" to the next offset to read. Returns how
 * the loop ended: {fenced: false} when the source ran dry, or {fenced: true, ...} when
 * another writer (a newer member, or an operator's reset) took the group over.
 */
async function consume(client, groupId, memberId, topics, poll, log = () => {}) {
  const generation = await client.joinGroup(groupId, memberId);
  log(`${memberId}: joined ${groupId} at generation ${generation}`);

  // The stored offset is the NEXT offset to read. Below 0 there is no position: -1 is
  // "nothing stored" (or an operator's reset to latest), -2 an operator's reset to earliest.
  // This source starts those at its beginning, as auto.offset.reset=earliest would; a
  // Kafka consumer would seek to the end for -1 and to the beginning for -2.
  const fetched = await client.fetchOffsets(groupId, topics);
  const positions = {};
  for (const o of fetched.offsets) positions[`${o.topic}:${o.partition}`] = o.offset < 0 ? 0 : o.offset;

  for (;;) {
    const batch = await poll(positions);
    if (batch.length === 0) return { fenced: false, generation, positions };
    const next = {};
    for (const record of batch) {
      const key = `${record.topic}:${record.partition}`;
      // ...process the record here...
      next[key] = Math.max(next[key] ?? 0, record.offset + 1); // last processed + 1
    }
    const offsets = Object.entries(next).map(([key, offset]) => {
      const i = key.lastIndexOf(':');
      return { topic: key.slice(0, i), partition: Number(key.slice(i + 1)), offset };
    });
    try {
      await client.commitOffsets(groupId, offsets, generation);
    } catch (error) {
      if (error.reason === 'STALE_GENERATION') {
        // Someone newer owns the group: stop without committing, do not retry.
        const current = Number(error.metadata.current_generation);
        log(`${memberId}: fenced at generation ${generation}; the group is at ${current}`);
        const { codeName: code, reason } = error;
        return { fenced: true, generation, current_generation: current, code, reason, positions };
      }
      throw error;
    }
    Object.assign(positions, next);
    log(`${memberId}: committed ${JSON.stringify(next)} at generation ${generation}`);
  }
}

/** A tiny in-memory source: `sizes[key]` records per partition, `batchSize` per poll. */
function memorySource(sizes, batchSize, onPoll = () => {}) {
  let polls = 0;
  return async (positions) => {
    await onPoll(++polls);
    const batch = [];
    for (const [key, size] of Object.entries(sizes)) {
      const i = key.lastIndexOf(':');
      const start = positions[key] ?? 0;
      for (let offset = start; offset < Math.min(size, start + batchSize); offset++) {
        batch.push({ topic: key.slice(0, i), partition: Number(key.slice(i + 1)), offset });
      }
    }
    return batch;
  };
}

// --- a demonstration of every path ---------------------------------------------------

async function main() {
  let values;
  try {
    ({ values } = parseArgs({
      options: {
        target: { type: 'string', default: process.env.OFFSETSTORE_SERVER || '127.0.0.1:50051' },
        group: { type: 'string', default: `node-example-${process.pid}` },
        help: { type: 'boolean', short: 'h', default: false },
      },
    }));
  } catch (error) {
    process.stderr.write(`${error.message}\n${USAGE}`);
    process.exit(2);
  }
  if (values.help) {
    process.stdout.write(USAGE);
    return;
  }
  const log = (line) => process.stderr.write(`${line}\n`);
  const client = new OffsetStoreClient(values.target);
  const group = values.group;
  const topics = [{ topic: TOPIC, partitions: [0, 1] }];
  const summary = { group };
  try {
    // 1. Member a consumes; after its second commit member b joins (a restart elsewhere,
    //    a rebalance), which fences a: its third commit is refused with STALE_GENERATION.
    const pollA = memorySource({ [`${TOPIC}:0`]: 100, [`${TOPIC}:1`]: 100 }, 10, async (n) => {
      if (n === 3) await client.joinGroup(group, 'member-b');
    });
    summary.member_a = await consume(client, group, 'member-a', topics, pollA, log);

    // 2. Member b resumes from what a committed: the next offset to read.
    const resumed = await client.fetchOffsets(group, [{ topic: TOPIC, partitions: [0, 1, 2] }]);
    summary.fetched = resumed.offsets.map((o) => ({ topic: o.topic, partition: o.partition, offset: o.offset }));
    summary.generation = resumed.generation;
    const pollB = memorySource({ [`${TOPIC}:0`]: 25, [`${TOPIC}:1`]: 30 }, 10);
    summary.member_b = await consume(client, group, 'member-b', topics, pollB, log);

    // 3. Compare-and-set: commit only if the stored offset is still the one we read.
    const current = await client.fetchOffsets(group, [{ topic: TOPIC, partitions: [0] }]);
    const stored = current.offsets[0].offset;
    const cas = (offset) => [{ topic: TOPIC, partition: 0, offset, expected_offset: stored }];
    await client.commitOffsets(group, cas(stored + 5), current.generation); // fenced, like every commit
    try {
      await client.commitOffsets(group, cas(stored + 9), current.generation);
      summary.mismatch = null;
    } catch (error) {
      if (error.reason !== 'OFFSET_MISMATCH') throw error;
      // Someone else moved the offset: re-read (stored_offset is in the metadata) and decide.
      log(`compare-and-set lost: stored offset is ${error.metadata.stored_offset}`);
      summary.mismatch = { code: error.codeName, reason: error.reason, stored_offset: Number(error.metadata.stored_offset) };
    }

    // 4. Bad input: INVALID_ARGUMENT with a BadRequest naming the field. A bug, never retry.
    try {
      await client.commitOffsets(group, [{ topic: 'no spaces allowed', partition: 0, offset: 1 }]);
      summary.invalid = null;
    } catch (error) {
      if (error.reason !== 'INVALID_ARGUMENT') throw error;
      summary.invalid = { code: error.codeName, reason: error.reason, violations: error.violations };
    }
  } finally {
    client.close();
  }
  process.stdout.write(`${JSON.stringify(summary)}\n`);
}

module.exports = { OffsetStoreClient, OffsetStoreError, consume, loadService, memorySource };

if (require.main === module) {
  main().catch((error) => {
    process.stderr.write(`${error.codeName ? `${error.codeName} ${error.reason}: ` : ''}${error.stack}\n`);
    process.exit(1);
  });
}
