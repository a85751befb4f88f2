// SPDX-License-Identifier: MIT
// The node host of the ggml tests: the model llama_prog writes, run through node-llama-cpp on
// llama.cpp's shipped libraries (never built: the prebuilt @node-llama-cpp/linux-x64), with the
// same prompt and greedy decoding as `llama_prog run`. Prints
//   tokens 17 3 99 ...
//   probabilities sum S
// (S: the sum over the decode steps of every token's probability times its id, a checksum of
// the logits after softmax).
//   node llama_node.mjs MODEL PROMPT GEN THREADS VOCAB
const root = new URL("../../third_party/llama/node_modules/node-llama-cpp/dist/index.js", import.meta.url);
const {getLlama} = await import(root.href);
const [modelPath, nPrompt, nGen, threads, vocab] = process.argv.slice(2).map((a, i) => (i ? +a : a));
const llama = await getLlama({gpu: false, build: "never", logLevel: "error"});
const model = await llama.loadModel({modelPath});
const context = await model.createContext({contextSize: nPrompt + nGen + 16, batchSize: nPrompt, threads});
const seq = context.getSequence();
const prompt = Array.from({length: nPrompt}, (_, i) => (i * 7919 + 13) % vocab);
const tokens = [];
let sum = 0;
for await (const step of seq.evaluateWithMetadata(prompt, {probabilities: true}, {temperature: 0})) {
  tokens.push(step.token);
  for (const [id, p] of step.probabilities)
    sum += id * p;
  if (tokens.length >= nGen)
    break;
}
console.log("tokens " + tokens.join(" "));
console.log("probabilities sum " + sum.toPrecision(12));
await context.dispose();
await model.dispose();
await llama.dispose();
