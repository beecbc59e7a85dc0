#!/bin/bash
wc -l < /app/data.txt > /app/answer.txt
