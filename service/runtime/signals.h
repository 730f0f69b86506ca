// SIGTERM / SIGINT as an ordinary callback on a thread of its own: the coordinator and the workers
// drain on it, which takes locks and talks to the network, so it cannot run inside a handler.
#pragma once

#include <functional>

namespace cubridge::service {

// Installs the handlers and starts the thread; `on_signal` runs once, for the first signal.
void OnTerminationSignal(std::function<void(int)> on_signal);

}  // namespace cubridge::service
