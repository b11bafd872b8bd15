#pragma once
// How the engine's OpenMP threads wait for work between parallel regions. OpenMP's default (spin
// about 3 ms, then sleep) is the fastest on free cores and collapses when other processes want
// them; sleeping at once (OMP_WAIT_POLICY=passive) holds under load but halves a bandwidth-bound
// model on free cores, and no spin count in between serves both (docs/building.md#threads). So
// the engine looks at the machine when it starts and picks one of the two. OpenMP reads its policy
// once, when it loads.
#include <string>

namespace retnet {

// Names the engine's choice for whoever loads OpenMP after choosing (the restarted `retnet`
// command, the Python package before it loads its extension): "busy" or "free".
inline constexpr const char* kThreadPolicyVariable = "RETNET_THREAD_POLICY";

// Called first in main(). Unless the environment sets OMP_WAIT_POLICY or GOMP_SPINCOUNT (the
// user's choice wins): when another task was runnable in each of five samples a millisecond apart
// (/proc/loadavg; one of our threads would share a core, and a spinning wait wastes it), restarts
// the process (same pid, arguments and environment) with OMP_WAIT_POLICY=passive and returns in the
// restarted one; else keeps OpenMP's default. Records the policy and removes what it set from the
// environment, so that the commands this process starts choose for themselves.
void apply_thread_policy();

// The same for a library loaded into a running process (the Python extension): records the
// policy that the loader chose (kThreadPolicyVariable) or the environment's, and cleans up.
void adopt_thread_policy();

// Whether OpenMP's threads sleep at once in the policy recorded (the engine's choice on busy cores,
// or the environment's OMP_WAIT_POLICY=passive or GOMP_SPINCOUNT=0): each parallel region then
// wakes them. False before a policy is recorded.
bool threads_sleep_at_once();

// The waiting policy in effect, for --version and benchmark reports.
std::string thread_policy();

}  // namespace retnet
