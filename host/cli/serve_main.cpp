// rudder-serve: `rudder serve` in a program of its own, which the rudder command runs (main.cpp).
#include "commands.hpp"

int main(int argc, char** argv) { return rudder::cli::run_command_line(argc, argv, rudder::cli::add_serve_command); }
