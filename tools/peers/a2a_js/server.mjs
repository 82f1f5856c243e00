// A second, independent A2A 1.0 implementation for the integration tests: @a2a-js/sdk on Node.
//
// One process serves three agents, each with its own card, JSON-RPC endpoint and HTTP+JSON endpoint:
//
//   GET  /agents/<scenario>/.well-known/agent-card.json   agent card (interface URLs absolute, real port)
//   POST /agents/<scenario>/jsonrpc                        JSON-RPC binding (first, preferred interface)
//   *    /agents/<scenario>/rest/...                       HTTP+JSON binding (second interface)
//   GET  /_test/log                                        every CancelTask received, as JSON:
//        {"cancels": [{scenario, binding, taskId, tenant, metadata, sdkMetadata, receivedAt, outcome}]}
//        metadata is what the client sent; sdkMetadata what the SDK handed on (the SDK's HTTP+JSON
//        binding drops CancelTask metadata: there it is always {}).
//
// Scenarios:
//   stream  SUBMITTED -> WORKING -> artifact "assistant-output" in 3 text chunks (append / lastChunk)
//           -> COMPLETED with status message "done: js"
//   fail    SUBMITTED -> WORKING -> FAILED with status message "failed: js"
//   hang    SUBMITTED -> WORKING -> nothing until CancelTask -> CANCELED
//
// Usage: node server.mjs [--host 127.0.0.1] [--port 0] [--watch-stdin]
// Prints exactly "READY <port>" on stdout once listening. --watch-stdin exits when stdin closes, so a
// killed test runner cannot leave this process behind. SIGTERM / SIGINT close every connection and exit.

import { AsyncLocalStorage } from 'node:async_hooks';
import { randomUUID } from 'node:crypto';
import process from 'node:process';

import express from 'express';
import { Role, TaskState } from '@a2a-js/sdk';
import { DefaultRequestHandler, InMemoryTaskStore } from '@a2a-js/sdk/server';
import { UserBuilder, agentCardHandler, jsonRpcHandler, restHandler } from '@a2a-js/sdk/server/express';

const SCENARIOS = ['stream', 'fail', 'hang'];
const STREAM_CHUNKS = ['Hello ', 'from ', 'a2a-js.'];
const STEP_MS = 20;

function parseArgs(argv) {
  const opts = { host: '127.0.0.1', port: 0, watchStdin: false };
  for (let i = 0; i < argv.length; i += 1) {
    const arg = argv[i];
    if (arg === '--host') opts.host = argv[++i];
    else if (arg === '--port') opts.port = Number(argv[++i]);
    else if (arg === '--watch-stdin') opts.watchStdin = true;
    else {
      process.stderr.write(`unknown argument: ${arg}\n`);
      process.exit(2);
    }
  }
  return opts;
}

const sleep = (ms) => new Promise((resolve) => setTimeout(resolve, ms));
const now = () => new Date().toISOString();

function textPart(text) {
  return { content: { $case: 'text', value: text }, mediaType: 'text/plain', filename: '', metadata: undefined };
}

function agentMessage(ctx, text) {
  return {
    messageId: randomUUID(),
    contextId: ctx.contextId,
    taskId: ctx.taskId,
    role: Role.ROLE_AGENT,
    parts: [textPart(text)],
    metadata: undefined,
    extensions: [],
    referenceTaskIds: [],
  };
}

function publishTask(ctx, bus, state) {
  bus.publish({
    kind: 'task',
    data: {
      id: ctx.taskId,
      contextId: ctx.contextId,
      status: { state, message: undefined, timestamp: now() },
      artifacts: [],
      history: [ctx.userMessage],
      metadata: undefined,
    },
  });
}

function publishStatus(ctx, bus, state, text) {
  bus.publish({
    kind: 'statusUpdate',
    data: {
      taskId: ctx.taskId,
      contextId: ctx.contextId,
      status: { state, message: text === undefined ? undefined : agentMessage(ctx, text), timestamp: now() },
      metadata: undefined,
    },
  });
}

function publishChunk(ctx, bus, artifactId, text, append, lastChunk) {
  bus.publish({
    kind: 'artifactUpdate',
    data: {
      taskId: ctx.taskId,
      contextId: ctx.contextId,
      artifact: {
        artifactId,
        name: 'assistant-output',
        description: '',
        parts: [textPart(text)],
        metadata: undefined,
        extensions: [],
      },
      append,
      lastChunk,
      metadata: undefined,
    },
  });
}

class StreamExecutor {
  async execute(ctx, bus) {
    publishTask(ctx, bus, TaskState.TASK_STATE_SUBMITTED);
    publishStatus(ctx, bus, TaskState.TASK_STATE_WORKING);
    const artifactId = randomUUID();
    for (let i = 0; i < STREAM_CHUNKS.length; i += 1) {
      await sleep(STEP_MS);
      publishChunk(ctx, bus, artifactId, STREAM_CHUNKS[i], i > 0, i === STREAM_CHUNKS.length - 1);
    }
    await sleep(STEP_MS);
    publishStatus(ctx, bus, TaskState.TASK_STATE_COMPLETED, 'done: js');
  }

  async cancelTask(taskId, bus) {
    // Too short-lived to cancel meaningfully; the handler reports "not cancelable" if it already ended.
    void taskId;
    void bus;
  }
}

class FailExecutor {
  async execute(ctx, bus) {
    publishTask(ctx, bus, TaskState.TASK_STATE_SUBMITTED);
    publishStatus(ctx, bus, TaskState.TASK_STATE_WORKING);
    await sleep(STEP_MS);
    publishStatus(ctx, bus, TaskState.TASK_STATE_FAILED, 'failed: js');
  }

  async cancelTask(taskId, bus) {
    void taskId;
    void bus;
  }
}

class HangExecutor {
  constructor() {
    this.running = new Map(); // taskId -> { ctx, release }
  }

  async execute(ctx, bus) {
    publishTask(ctx, bus, TaskState.TASK_STATE_SUBMITTED);
    publishStatus(ctx, bus, TaskState.TASK_STATE_WORKING);
    // Never finishes on its own: only cancelTask releases it (CANCELED is published there).
    await new Promise((release) => this.running.set(ctx.taskId, { ctx, release }));
  }

  async cancelTask(taskId, bus) {
    const entry = this.running.get(taskId);
    if (entry === undefined) return;
    this.running.delete(taskId);
    publishStatus(entry.ctx, bus, TaskState.TASK_STATE_CANCELED, 'cancelled: js');
    entry.release();
  }
}

// The body of an HTTP+JSON CancelTask as it arrived: @a2a-js/sdk 1.3.0's REST binding drops it
// (it hands the request handler `metadata: {}` whatever the client sent).
const restCancelBody = new AsyncLocalStorage();
const REST_BODY_TYPES = ['application/json', 'application/a2a+json'];

function captureRestCancelBody() {
  const parse = express.json({ type: REST_BODY_TYPES, strict: false });
  return (req, res, next) => {
    if (req.method !== 'POST' || !req.path.endsWith(':cancel')) {
      next();
      return;
    }
    parse(req, res, (err) => {
      if (err) {
        next(err);
        return;
      }
      restCancelBody.run({ body: req.body }, next);
    });
  };
}

// CancelTask reaches the executor without tenant or metadata: record it one level up.
class RecordingRequestHandler extends DefaultRequestHandler {
  constructor(scenario, cancelLog, ...args) {
    super(...args);
    this.scenario = scenario;
    this.cancelLog = cancelLog;
  }

  async cancelTask(params, context) {
    const rest = restCancelBody.getStore();
    const sdkMetadata = params.metadata ?? null;
    const wireMetadata = rest === undefined ? sdkMetadata : (rest.body?.metadata ?? null);
    const record = {
      scenario: this.scenario,
      binding: rest === undefined ? 'JSONRPC' : 'HTTP+JSON',
      taskId: params.id,
      tenant: params.tenant || context?.tenant || null,
      metadata: wireMetadata, // what the client sent
      sdkMetadata, // what the SDK passed on to its request handler
      receivedAt: now(),
      outcome: 'pending',
    };
    this.cancelLog.push(record);
    try {
      const task = await super.cancelTask(params, context);
      record.outcome = TaskState[task.status?.state] ?? String(task.status?.state);
      return task;
    } catch (err) {
      record.outcome = `error: ${err?.name ?? 'Error'}: ${err?.message ?? String(err)}`;
      throw err;
    }
  }
}

function agentCard(scenario, baseUrl) {
  const prefix = `${baseUrl}/agents/${scenario}`;
  return {
    name: `a2a-js ${scenario}`,
    description: `@a2a-js/sdk test agent, scenario "${scenario}"`,
    supportedInterfaces: [
      { url: `${prefix}/jsonrpc`, protocolBinding: 'JSONRPC', tenant: '', protocolVersion: '1.0' },
      { url: `${prefix}/rest`, protocolBinding: 'HTTP+JSON', tenant: '', protocolVersion: '1.0' },
    ],
    provider: { url: 'https://github.com/a2aproject/a2a-js', organization: 'subagent-engine tests' },
    version: '1.0.0',
    capabilities: { streaming: true, pushNotifications: false, extensions: [], extendedAgentCard: false },
    securitySchemes: {},
    securityRequirements: [],
    defaultInputModes: ['text/plain'],
    defaultOutputModes: ['text/plain'],
    skills: [
      {
        id: scenario,
        name: scenario,
        description: `scenario ${scenario}`,
        tags: ['test'],
        examples: [],
        inputModes: [],
        outputModes: [],
        securityRequirements: [],
      },
    ],
    signatures: [],
  };
}

const EXECUTORS = { stream: StreamExecutor, fail: FailExecutor, hang: HangExecutor };

function main() {
  const opts = parseArgs(process.argv.slice(2));
  const app = express();
  const cancelLog = [];

  app.get('/_test/log', (_req, res) => {
    res.json({ cancels: cancelLog });
  });

  const server = app.listen(opts.port, opts.host, () => {
    const { port } = server.address();
    const baseUrl = `http://${opts.host}:${port}`;
    for (const scenario of SCENARIOS) {
      const handler = new RecordingRequestHandler(
        scenario,
        cancelLog,
        agentCard(scenario, baseUrl),
        new InMemoryTaskStore(),
        new EXECUTORS[scenario](),
      );
      const prefix = `/agents/${scenario}`;
      app.use(`${prefix}/.well-known/agent-card.json`, agentCardHandler({ agentCardProvider: handler, cache: { maxAge: 0 } }));
      app.use(`${prefix}/jsonrpc`, jsonRpcHandler({ requestHandler: handler, userBuilder: UserBuilder.noAuthentication }));
      app.use(`${prefix}/rest`, captureRestCancelBody(), restHandler({ requestHandler: handler, userBuilder: UserBuilder.noAuthentication }));
    }
    app.use((_req, res) => {
      res.status(404).json({ error: 'not found' });
    });
    process.stdout.write(`READY ${port}\n`);
  });

  server.on('error', (err) => {
    process.stderr.write(`server error: ${err?.stack ?? err}\n`);
    process.exit(1);
  });

  let stopping = false;
  const shutdown = () => {
    if (stopping) return;
    stopping = true;
    // Tasks are in memory only and hang tasks never end by themselves: stop listening, drop every
    // open connection (SSE streams included) and exit right away.
    server.close();
    server.closeAllConnections();
    setImmediate(() => process.exit(0));
  };
  process.on('SIGTERM', shutdown);
  process.on('SIGINT', shutdown);
  if (opts.watchStdin) {
    process.stdin.on('end', shutdown);
    process.stdin.on('close', shutdown);
    process.stdin.on('error', shutdown);
    process.stdin.resume();
  }
}

main();
