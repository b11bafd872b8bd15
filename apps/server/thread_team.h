#pragma once
// The server's OpenMP threads. libgomp spins at a barrier (OpenMP's default wait, which the engine
// keeps on free cores) only while the threads it manages fit the cores, and each thread that starts
// parallel regions keeps a team of its own: the team of the thread that loaded the model, left
// beside the inference thread's, would make every barrier of a decode step sleep and be woken.
// So the server keeps one team, the inference thread's, set up as `retnet generate` sets up its
// main thread.
namespace retnet::server {

// --threads (0: every core) for the calling thread's parallel regions, and denormals flushed to
// zero on it and on its team, as the engine's commands do on their main thread.
void adopt_engine_threads(int threads);

// Ends the calling thread's team (its threads exit); the thread's next parallel region starts a
// new one. Not inside a parallel region.
void release_thread_team();

}  // namespace retnet::server
