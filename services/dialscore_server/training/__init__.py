"""Training the DECODE contradiction detector (`dialscore train detector`).

`examples` turns DECODE-format dialogues into classifier examples exactly as the service pairs
them; `synthetic` generates a contradiction set for tests; `detector` fine-tunes a checkpoint with
Hugging Face's Trainer and writes one the registry serves as is.
"""
