#include "service/runtime/signals.h"

#include <signal.h>
#include <unistd.h>

#include <thread>

namespace cubridge::service {
namespace {

int g_pipe[2] = {-1, -1};

// Only async-signal-safe work here: hand the signal number to the thread.
void Handler(int sig) {
  const char byte = static_cast<char>(sig);
  (void)!write(g_pipe[1], &byte, 1);
}

}  // namespace

void OnTerminationSignal(std::function<void(int)> on_signal) {
  // A handler rather than a blocked mask: threads that libraries start before main() (LibTorch's
  // pools) would not have the mask, and the default action would kill the process.
  if (pipe(g_pipe) != 0) return;
  struct sigaction sa = {};
  sa.sa_handler = Handler;
  sigemptyset(&sa.sa_mask);
  sa.sa_flags = SA_RESTART;
  sigaction(SIGTERM, &sa, nullptr);
  sigaction(SIGINT, &sa, nullptr);
  std::thread([on_signal = std::move(on_signal)] {
    char byte = 0;
    while (read(g_pipe[0], &byte, 1) != 1) {
    }
    on_signal(static_cast<int>(byte));
  }).detach();
}

}  // namespace cubridge::service
