// What sluice-run runs after a job to bring back what ranks on other hosts left there: each
// command at once, its output bounded and its time too.
#pragma once

#include <chrono>
#include <functional>
#include <string>
#include <vector>

namespace sluice::run {

struct Gathered {
  std::string text;   // what the command wrote to its standard output
  std::string error;  // why `text` is not to be used ("more than 1048576 bytes"), or empty
};

// Runs every command of `argvs` at once (standard input /dev/null, standard error the
// launcher's) and returns, in the same order, what each wrote, at most `limit` bytes of it
// (more is read and dropped, and is an error). A command that exits non-zero has an error; one
// still running at `timeout` is killed and has one. When `stop_fd` is readable and `stop()` says so (a signal for the
// launcher), the commands still running are killed.
std::vector<Gathered> gather_output(const std::vector<std::vector<std::string>>& argvs, std::size_t limit,
                                    std::chrono::milliseconds timeout, int stop_fd, const std::function<bool()>& stop);

}  // namespace sluice::run
