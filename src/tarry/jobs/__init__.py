"""Carrying stored chats on in the background: ``continue_chat``, the embedded ``Worker``, and Celery.

``tarry.jobs.celery`` (``pip install 'tarry[celery]'``) runs ``continue_chat`` as a Celery task.
"""

from tarry.jobs.carry import continue_chat
from tarry.jobs.worker import Worker

__all__ = ["Worker", "continue_chat"]
