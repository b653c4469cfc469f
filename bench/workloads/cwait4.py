"""Benchmark workload for native frames: four threads that wait in C (a lock's acquire, a socket's
recv, a select, a sleep), each woken every 50 ms by the main thread to do a little work and wait again:
their C frames change between samples now and then, as a service's do."""
import select
import socket
import threading
import time

lock = threading.Lock()
lock.acquire()
reader, writer = socket.socketpair()
piper, pipew = socket.socketpair()


def work():
    return sum(i * i for i in range(2000))


def in_lock():
    while True:
        lock.acquire()
        work()


def in_recv():
    while True:
        reader.recv(1)
        work()


def in_select():
    while True:
        select.select([piper], [], [])
        piper.recv(1)
        work()


def in_sleep():
    while True:
        time.sleep(0.05)
        work()


for f in (in_lock, in_recv, in_select, in_sleep):
    threading.Thread(target=f, daemon=True).start()
while True:
    time.sleep(0.05)
    lock.release()
    writer.send(b"x")
    pipew.send(b"x")
