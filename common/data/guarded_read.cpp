#include "common/data/guarded_read.h"

#include <csetjmp>
#include <csignal>
#include <mutex>

namespace trainmem {

namespace {

// Where to jump when this thread faults inside read_guarded (null: not inside one).
thread_local sigjmp_buf* t_jump = nullptr;
struct sigaction g_previous_action;  // SIGBUS's action before ours

void on_sigbus(int, siginfo_t* info, void*) {
  if (t_jump != nullptr) siglongjmp(*t_jump, 1);
  // Not a guarded read: the previous action takes this signal. A fault repeats when the faulting
  // instruction runs again on return; a signal sent by kill() (si_code <= 0) is sent again.
  sigaction(SIGBUS, &g_previous_action, nullptr);
  if (info->si_code <= 0) raise(SIGBUS);
}

void install_handler_once() {
  static std::once_flag once;
  std::call_once(once, [] {
    struct sigaction action {};
    action.sa_sigaction = on_sigbus;
    sigemptyset(&action.sa_mask);
    action.sa_flags = SA_SIGINFO;
    sigaction(SIGBUS, &action, &g_previous_action);
  });
}

}  // namespace

bool read_guarded(void (*read)(void* context), void* context) {
  install_handler_once();
  sigjmp_buf* const outer = t_jump;  // (a guarded read inside another: the inner one catches)
  sigjmp_buf jump;
  if (sigsetjmp(jump, 1) != 0) {  // 1: the signal mask is restored (SIGBUS unblocked again)
    t_jump = outer;
    return false;
  }
  t_jump = &jump;
  read(context);
  t_jump = outer;
  return true;
}

}  // namespace trainmem
