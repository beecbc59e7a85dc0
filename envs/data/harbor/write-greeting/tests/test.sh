#!/bin/bash
# Runs from the working directory after the agent; writes the reward Harbor-style.
if python3 /tests/check.py; then
  echo 1 > /logs/verifier/reward.txt
else
  echo 0 > /logs/verifier/reward.txt
fi
