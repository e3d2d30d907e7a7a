// Runs a config from a std::thread through the installed libschedrun.
//   consumer_{shared,static} CONFIG    exit 0 when every job verified
#include <pthread.h>
#include <sched.h>
#include <schedrun.h>

#include <cstdio>
#include <string>
#include <thread>

int main(int argc, char **argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: %s CONFIG\n", argv[0]);
    return 2;
  }
  int rc = 1;
  std::string what;
  std::thread worker([&] {
    schedrun_t *s = nullptr;
    schedrun_program_t *p = nullptr;
    schedrun_report_t *r = nullptr;
    schedrun_error_t err{};
    schedrun_options_t o;
    schedrun_options_init(&o);
    o.devices = "host";
    if (schedrun_open(&s, &o, &err) == SCHEDRUN_OK && schedrun_program_load_file(s, argv[1], &p, &err) == SCHEDRUN_OK &&
        schedrun_run(s, p, nullptr, &r, &err) == SCHEDRUN_OK) {
      const schedrun_summary_t *sum = schedrun_report_summary(r);
      if (sum->jobs > 0 && sum->verified == sum->jobs && sum->failed == 0) rc = 0;
      what = std::to_string(sum->verified) + " of " + std::to_string(sum->jobs) + " jobs verified";
    } else {
      what = err.message ? err.message : "failed";
    }
    schedrun_report_free(&r);
    schedrun_program_free(&p);
    schedrun_close(&s);
    schedrun_error_clear(&err);
  });
  worker.join();
  std::printf("%s: %s (schedrun %s)\n", argv[0], what.c_str(), schedrun_version());
  return rc;
}
