// SPDX-License-Identifier: MIT
// The node host of the ggml tests: the model llama_prog writes, run through node-llama-cpp on
// llama.cpp's shipped libraries (never built: the prebuilt @node-llama-cpp/linux-x64), with the
// same prompt and greedy decoding as `llama_prog run`. Prints
//   tokens 17 3 99 ...
//   probabilities sum S
// (S: the sum over the decode steps of every token's probability times its id, a checksum of
// the logits after softmax).
//   node llama_node.mjs MODEL PROMPT GEN THREADS VOCAB [ROUNDS GO_FILE]
// ROUNDS > 1 generates again from a cleared sequence once GO_FILE exists (the test creates it
// when the agent has stored what the first round compiled: node cannot call opjit_settle), and
// fails unless every round gives the first one's tokens; the lines are the last round's.
import {existsSync} from "node:fs";
const root = new URL("../../third_party/llama/node_modules/node-llama-cpp/dist/index.js", import.meta.url);
const {getLlama} = await import(root.href);
const [modelPath, nPrompt, nGen, threads, vocab, rounds = 1, goFile] =
  process.argv.slice(2).map((a, i) => (i && i < 6 ? +a : a));
const llama = await getLlama({gpu: false, build: "never", logLevel: "error"});
const model = await llama.loadModel({modelPath});
const context = await model.createContext({contextSize: nPrompt + nGen + 16, batchSize: nPrompt, threads});
const seq = context.getSequence();
const prompt = Array.from({length: nPrompt}, (_, i) => (i * 7919 + 13) % vocab);
let first = null, line = "", sum = 0;
for (let round = 0; round < rounds; round++) {
  if (round) {
    while (!existsSync(goFile))
      await new Promise((done) => setTimeout(done, 20));
    await seq.clearHistory();
  }
  const tokens = [];
  sum = 0;
  for await (const step of seq.evaluateWithMetadata(prompt, {probabilities: true}, {temperature: 0})) {
    tokens.push(step.token);
    for (const [id, p] of step.probabilities)
      sum += id * p;
    if (tokens.length >= nGen)
      break;
  }
  line = "tokens " + tokens.join(" ");
  first ??= line;
  if (line !== first) {
    console.error(`round ${round + 1}: ${line}\nround 1: ${first}`);
    process.exit(2);
  }
}
console.log(line);
console.log("probabilities sum " + sum.toPrecision(12));
await context.dispose();
await model.dispose();
await llama.dispose();
