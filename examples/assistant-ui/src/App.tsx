// A chat on assistant-ui's AG-UI runtime, pointed at subagent-engine's POST /agui.
//
// What the library renders natively: the parent's text and tool calls, and each subagent the
// engine announces (SUBAGENT_STARTED with parentToolCallId) as a nested assistant message on the
// spawning tool call (ToolCallMessagePart.messages), which `MessagePartPrimitive.Messages` renders
// with the ordinary message primitives, streaming. Stop is the composer's Cancel (it aborts the
// POST /agui stream, and the engine stops the run when its stream closes).
//
// What is ours: the look of each piece; `Questions`, a small form for the AG-UI interrupts the
// run ended with (a subagent's question): the runtime keeps them (`useAgUiInterrupts`) and
// answers them with a resume on the same thread (`useAgUiSubmitInterruptResponses`), but draws
// no UI for them; `SpawnResult`, which lets a subagent card that waited for an answer show how
// its delegation ended: the runtime streams a resumed run into a new assistant message, where a
// subagent re-announced under its id has no spawning call to nest under (react-ag-ui 0.0.58's
// README: nested human-in-the-loop has no resume path yet), so its card would keep waiting while
// its delegate call's result says it completed; and `StoppedMessage`, which remembers the
// message whose run the user stopped: @ag-ui/client 0.0.59 reports its own aborted request as a
// RUN_ERROR (code "abort"), which the runtime applies after its RUN_CANCELLED, so a stopped run's
// message would otherwise read as failed.
import { HttpAgent } from "@ag-ui/client";
import {
  AssistantRuntimeProvider,
  ComposerPrimitive,
  MessagePartPrimitive,
  MessagePrimitive,
  ThreadPrimitive,
  useAuiState,
  type ToolCallMessagePartProps,
} from "@assistant-ui/react";
import {
  useAgUiInterrupts,
  useAgUiRuntime,
  useAgUiSubmitInterruptResponses,
  type AgUiInterrupt,
} from "@assistant-ui/react-ag-ui";
import {
  createContext,
  useContext,
  useMemo,
  useRef,
  useState,
  type FormEvent,
} from "react";

type MessageStatus = { type: string; reason?: string } | undefined;

/** The id of the message whose run the user stopped (see the opening comment). */
const StoppedMessage = createContext<string | undefined>(undefined);

/** A status as a person should read it: a run the user stopped reads as cancelled. */
function asShown(id: string | undefined, status: MessageStatus, stopped: string | undefined) {
  if (id !== undefined && id === stopped && status?.type === "incomplete") {
    return { type: "incomplete", reason: "cancelled" };
  }
  return status;
}

/** The status of the message in scope, as shown. */
function useMessageStatus(): MessageStatus {
  const id = useAuiState(({ message }) => message.id);
  const status = useAuiState(({ message }) => message.status as MessageStatus);
  return asShown(id, status, useContext(StoppedMessage));
}

/** The result of the delegate call a subagent card sits in (undefined while it runs). */
const SpawnResult = createContext<unknown>(undefined);

/** A suspended subagent's status once its delegate call has a result (see the opening comment). */
function settled(status: MessageStatus, spawnResult: unknown): MessageStatus {
  if (status?.type !== "requires-action" || spawnResult === undefined) return status;
  let outcome: unknown = spawnResult;
  if (typeof spawnResult === "string") {
    try {
      outcome = JSON.parse(spawnResult);
    } catch {
      outcome = undefined;
    }
  }
  const ended = (outcome as { status?: string } | undefined)?.status;
  if (ended === "completed") return { type: "complete" };
  return { type: "incomplete", reason: ended === "cancelled" ? "cancelled" : "error" };
}

/** The words a person reads for a message's status (the runtime's `MessageStatus`). */
function describe(status: MessageStatus): string {
  if (status === undefined) return "";
  if (status.type === "running") return "running";
  if (status.type === "requires-action") return "waiting for your answer";
  if (status.type === "incomplete") return status.reason === "cancelled" ? "stopped" : "failed";
  return "done";
}

function stateOf(status: MessageStatus): string {
  if (status === undefined) return "idle";
  if (status.type === "incomplete") return status.reason === "cancelled" ? "cancelled" : "failed";
  if (status.type === "requires-action") return "waiting";
  return status.type === "running" ? "running" : "finished";
}

function SubagentTool({ toolName, argsText, result }: ToolCallMessagePartProps) {
  return (
    <div className="subagent-tool">
      <span className="tool-name">{toolName}</span> <code>{argsText}</code>
      {result !== undefined && <code className="tool-result"> → {JSON.stringify(result)}</code>}
    </div>
  );
}

/** One subagent: a nested assistant message whose `agui` metadata names it. */
function Subagent() {
  const name = useAuiState(({ message }) => {
    const agui = (message.metadata.custom as { agui?: { name?: string } }).agui;
    return agui?.name ?? "Subagent";
  });
  const status = settled(useMessageStatus(), useContext(SpawnResult));
  return (
    <MessagePrimitive.Root className="subagent" data-status={stateOf(status)}>
      <div className="subagent-head">
        <span className="subagent-name">{name}</span>
        <span className="badge">{describe(status)}</span>
      </div>
      <div className="subagent-body">
        <MessagePrimitive.Parts
          components={{
            // No typing animation: each state of the text is one the stream delivered.
            Text: () => (
              <MessagePartPrimitive.Text className="subagent-text" component="p" smooth={false} />
            ),
            tools: { Fallback: SubagentTool },
          }}
        />
      </div>
    </MessagePrimitive.Root>
  );
}

/** The parent's tool call; a delegate call holds the subagents it spawned. */
function ToolCall({ toolName, argsText, result }: ToolCallMessagePartProps) {
  return (
    <div className="tool-call" data-tool={toolName}>
      <div className="tool-head">
        <span className="tool-name">{toolName}</span>
        <code className="tool-args">{argsText}</code>
      </div>
      <div className="subagents">
        <SpawnResult.Provider value={result}>
          <MessagePartPrimitive.Messages>{() => <Subagent />}</MessagePartPrimitive.Messages>
        </SpawnResult.Provider>
      </div>
      {result !== undefined && (
        <details className="tool-result">
          <summary>result</summary>
          <pre>{typeof result === "string" ? result : JSON.stringify(result, null, 2)}</pre>
        </details>
      )}
    </div>
  );
}

function UserMessage() {
  return (
    <MessagePrimitive.Root className="message user">
      <MessagePrimitive.Parts />
    </MessagePrimitive.Root>
  );
}

function AssistantMessage() {
  const status = useMessageStatus();
  return (
    <MessagePrimitive.Root className="message assistant" data-status={stateOf(status)}>
      <MessagePrimitive.Parts
        components={{
          Text: () => <MessagePartPrimitive.Text className="parent-text" component="p" />,
          tools: { Fallback: ToolCall },
        }}
      />
      {status?.type === "incomplete" && (
        <p className="ended">{status.reason === "cancelled" ? "Stopped." : "The run failed."}</p>
      )}
    </MessagePrimitive.Root>
  );
}

/** The open interrupts (a subagent's question): one field each, answered together. */
function Questions() {
  const interrupts = useAgUiInterrupts();
  const submit = useAgUiSubmitInterruptResponses();
  const [answers, setAnswers] = useState<Record<string, string>>({});
  const [error, setError] = useState<string>();
  if (interrupts.length === 0) return null;

  const respond = (status: "resolved" | "cancelled") => {
    setError(undefined);
    submit(
      interrupts.map((interrupt) => ({
        interruptId: interrupt.id,
        status,
        ...(status === "resolved" ? { payload: answers[interrupt.id] ?? "" } : {}),
      })),
    ).catch((reason: unknown) => setError(String(reason)));
  };
  const onSubmit = (event: FormEvent) => {
    event.preventDefault();
    respond("resolved");
  };
  const asker = (interrupt: AgUiInterrupt) =>
    String(interrupt.metadata?.agentName ?? interrupt.metadata?.agentKey ?? "A subagent");

  return (
    <form className="questions" onSubmit={onSubmit}>
      {interrupts.map((interrupt) => (
        <label key={interrupt.id} className="question">
          <span className="asker">{asker(interrupt)} asks:</span>
          <span className="question-text">{interrupt.message}</span>
          <input
            autoFocus
            value={answers[interrupt.id] ?? ""}
            onChange={(event) => setAnswers({ ...answers, [interrupt.id]: event.target.value })}
          />
        </label>
      ))}
      <div className="question-actions">
        <button type="submit">Answer</button>
        <button type="button" onClick={() => respond("cancelled")}>
          Decline
        </button>
      </div>
      {error && <p className="error">{error}</p>}
    </form>
  );
}

/** The run's state for a person (and for tests: `data-state`). */
function RunStatus() {
  const id = useAuiState(({ thread }) => thread.messages.at(-1)?.id);
  const status = useAuiState(({ thread }) => thread.messages.at(-1)?.status as MessageStatus);
  const state = stateOf(asShown(id, status, useContext(StoppedMessage)));
  const words: Record<string, string> = {
    idle: "Ready",
    running: "Running…",
    waiting: "A subagent waits for your answer",
    cancelled: "Stopped",
    failed: "Failed",
    finished: "Finished",
  };
  return (
    <div id="run-status" data-state={state}>
      {words[state]}
    </div>
  );
}

function Thread() {
  return (
    <ThreadPrimitive.Root className="thread">
      <header className="bar">
        <h1>subagent-engine · assistant-ui</h1>
        <RunStatus />
      </header>
      <ThreadPrimitive.Viewport className="viewport">
        <ThreadPrimitive.Messages components={{ UserMessage, AssistantMessage }} />
        <Questions />
      </ThreadPrimitive.Viewport>
      <ComposerPrimitive.Root className="composer">
        <ComposerPrimitive.Input placeholder="Ask the parent agent…" rows={1} autoFocus />
        <ThreadPrimitive.If running={false}>
          <ComposerPrimitive.Send className="send">Run</ComposerPrimitive.Send>
        </ThreadPrimitive.If>
        <ThreadPrimitive.If running>
          <ComposerPrimitive.Cancel className="stop">Stop</ComposerPrimitive.Cancel>
        </ThreadPrimitive.If>
      </ComposerPrimitive.Root>
    </ThreadPrimitive.Root>
  );
}

export function App() {
  // Same origin: the dev and preview servers proxy /agui to the engine (vite.config.ts).
  const agent = useMemo(() => new HttpAgent({ url: "/agui" }), []);
  const [stopped, setStopped] = useState<string>();
  const latest = useRef<() => string | undefined>(() => undefined);
  const runtime = useAgUiRuntime({ agent, onCancel: () => setStopped(latest.current()) });
  latest.current = () => runtime.thread.getState().messages.at(-1)?.id;
  return (
    <AssistantRuntimeProvider runtime={runtime}>
      <StoppedMessage.Provider value={stopped}>
        <Thread />
      </StoppedMessage.Provider>
    </AssistantRuntimeProvider>
  );
}
