// rudder-train: `rudder train` and `rudder train-controller` in a program of their own, which the rudder command
// runs (main.cpp).
#include "commands.hpp"

int main(int argc, char** argv) { return rudder::cli::run_command_line(argc, argv, rudder::cli::add_train_commands); }
