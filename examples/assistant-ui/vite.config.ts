// The app talks to the engine's POST /agui on its own origin: `vite` (dev) and `vite preview`
// forward /agui to the bundled server (SUBAGENT_ENGINE_URL, default `./dev run`'s
// http://127.0.0.1:8080). The server refuses pages from a foreign Origin (its request guard), so
// the proxy sends the request as the server's own origin; the browser never leaves this one.
import react from "@vitejs/plugin-react";
import { defineConfig, loadEnv, type ProxyOptions } from "vite";

export default defineConfig(({ mode }) => {
  const engine =
    loadEnv(mode, ".", "SUBAGENT_ENGINE_").SUBAGENT_ENGINE_URL ?? "http://127.0.0.1:8080";
  const proxy: Record<string, ProxyOptions> = {
    "/agui": { target: engine, changeOrigin: true, headers: { origin: engine } },
  };
  return {
    plugins: [react()],
    build: { chunkSizeWarningLimit: 2000 },
    server: { host: "127.0.0.1", proxy },
    preview: { host: "127.0.0.1", proxy },
  };
});
